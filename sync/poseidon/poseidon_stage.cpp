#include "sync/poseidon/poseidon_stage.h"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "sync/layer_plan.h"
#include "sync/poseidon/messages.h"
#include "sync/ps/messages.h"

namespace gradmesh::sync {

namespace {

bool has_factors(tasks::Layer& layer) {
  return layer.has_sufficient_factors() && layer.parameter_count() > 0;
}

std::vector<topo::Scheme> choose_schemes(tasks::Model& model, std::size_t nodes, std::size_t batch,
                                         PoseidonStage::SfbMode mode) {
  std::vector<topo::Scheme> schemes;
  for (std::size_t l = 0; l < model.num_layers(); ++l) {
    tasks::Layer& layer = model.layer(l);
    topo::Scheme s = topo::Scheme::kPs;
    if (has_factors(layer) && mode == PoseidonStage::SfbMode::kAlways) s = topo::Scheme::kSfb;
    if (mode == PoseidonStage::SfbMode::kAuto) {
      // Algorithm 1 with every node both worker and colocated server: P1 = P2 = n.
      s = topo::best_scheme(has_factors(layer), layer.output_size(), layer.input_size(), batch, nodes,
                            nodes);
    }
    schemes.push_back(s);
  }
  return schemes;
}

/// The KV placement of the PS layers' parameters (SFB layers own no chunks).
topo::KvPlacement ps_placement(const SyncContext& ctx, const std::vector<topo::Scheme>& schemes) {
  std::vector<topo::ParameterBlock> blocks;
  std::size_t total = 0;
  for (std::size_t l = 0; l < ctx.model.num_layers(); ++l) {
    const std::size_t size = ctx.model.layer(l).parameter_count();
    if (size > 0 && schemes[l] == topo::Scheme::kPs) {
      blocks.push_back({l, ctx.model.parameter_offset(l), size});
      total += size;
    }
  }
  const std::size_t chunk_floats =
      ctx.options.ps.chunk_bytes
          ? std::max<std::size_t>(1, *ctx.options.ps.chunk_bytes / sizeof(float))
          : topo::KvPlacement::auto_chunk_floats(total, ctx.nodes);
  return topo::KvPlacement(blocks, ctx.nodes, chunk_floats);
}

net::Payload float_view(std::span<const float> values) {
  return net::Payload::view(std::as_bytes(values));
}

}  // namespace

PoseidonStage::SfbMode PoseidonStage::parse_sfb_mode(std::string_view text) {
  if (text == "auto") return SfbMode::kAuto;
  if (text == "always") return SfbMode::kAlways;
  if (text == "never") return SfbMode::kNever;
  throw ConfigError("sync.poseidon.sfb = \"" + std::string(text) +
                    "\": expected one of auto, always, never");
}

PoseidonStage::PoseidonStage(SyncContext context, std::string name, SfbMode mode)
    : ctx_(std::move(context)),
      name_(std::move(name)),
      schemes_(choose_schemes(ctx_.model, ctx_.nodes, ctx_.batch_size, mode)),
      placement_(ps_placement(ctx_, schemes_)),
      channel_(ctx_.transport, ctx_.rank, ctx_.nodes),
      shard_(placement_, ctx_.rank, ctx_.model.parameters(), ctx_.optimizer),
      arrivals_(ctx_.model.num_layers()),
      sfb_(ctx_.model.num_layers()) {
  bool any_sfb = false;
  for (std::size_t l = 0; l < schemes_.size(); ++l) {
    if (schemes_[l] != topo::Scheme::kSfb) continue;
    tasks::Layer& layer = ctx_.model.layer(l);
    sfb_[l] = std::make_unique<SfbLayer>(layer.output_size(), layer.input_size(), ctx_.batch_size,
                                         ctx_.nodes, ctx_.rank);
    // The mean dW is rebuilt from every node's factors: the local one would be thrown away.
    layer.set_parameter_gradients_enabled(false);
    any_sfb = true;
  }
  push_stage_ = channel_.route(
      ps::kPushStage, [this](std::size_t from, net::Message&& m) { on_push(from, std::move(m)); });
  broadcast_stage_ = channel_.route(ps::kBroadcastStage, [this](std::size_t from, net::Message&& m) {
    on_parameters(from, std::move(m));
  });
  if (any_sfb) {
    sfb_stage_ = channel_.route(
        sfb::kStage, [this](std::size_t from, net::Message&& m) { on_factors(from, std::move(m)); });
  }
  channel_.on_failure([this](const PeerError& error) { on_failure(error); });
}

void PoseidonStage::build(engine::Graph& graph, const IterationTasks& tasks) {
  for (std::size_t l = 0; l < ctx_.model.num_layers(); ++l) {
    const std::string suffix = "_" + std::to_string(l);
    if (sfb_[l]) {
      auto send = graph.emplace("sfb_send" + suffix, engine::Arena::kNetwork,
                                [this, l](engine::TaskContext& ctx) { send_factors(l, ctx.run()); });
      auto wait = graph.emplace("sfb_wait" + suffix, engine::Arena::kNetwork,
                                [this, l](engine::TaskContext& ctx) {
                                  sfb_[l]->await(ctx.run(), ctx.defer());
                                });
      auto apply = graph.emplace("sfb_apply" + suffix, engine::Arena::kNetwork,
                                 [this, l](engine::TaskContext& ctx) { apply_factors(l, ctx.run()); });
      tasks.backward[l].precede(send);
      send.precede(wait);
      wait.precede(apply);
      apply.precede(tasks.done);
      continue;
    }
    if (placement_.chunks_of_layer(l).empty()) continue;
    auto push = graph.emplace("push" + suffix, engine::Arena::kNetwork,
                              [this, l](engine::TaskContext& ctx) { push_layer(l, ctx.run()); });
    auto pull = graph.emplace("pull" + suffix, engine::Arena::kNetwork,
                              [this, l](engine::TaskContext& ctx) {
                                arrivals_.await(l, ctx.run(), ctx.defer());
                              });
    tasks.backward[l].precede(push);
    push.precede(pull);
    pull.precede(tasks.done);
  }
}

// ---- SFB ----

void PoseidonStage::send_factors(std::size_t layer, std::uint64_t round) {
  const net::Payload factors =
      sfb_[layer]->pack(round, ctx_.model.layer_output_gradient(layer, ctx_.batch_size),
                        ctx_.model.layer_input(layer, ctx_.batch_size));
  throw_first(channel_.broadcast(net::Message{
      sfb_stage_, static_cast<std::uint16_t>(sfb::Kind::kSufficientFactors), layer, round, factors}));
}

void PoseidonStage::apply_factors(std::size_t layer, std::uint64_t round) {
  tasks::Layer& info = ctx_.model.layer(layer);
  const std::size_t weights = info.output_size() * info.input_size();
  const std::span<float> gradients = ctx_.model.layer_gradients(layer);
  sfb_[layer]->rebuild(round, gradients.first(weights), gradients.subspan(weights));
  ctx_.optimizer.step(ctx_.model.parameter_offset(layer), ctx_.model.layer_parameters(layer),
                      gradients);
}

// ---- PS ----

void PoseidonStage::push_layer(std::size_t layer, std::uint64_t round) {
  const auto chunks = placement_.chunks_of_layer(layer);
  arrivals_.expect(layer, round, chunks.size());
  const std::span<const float> gradients = ctx_.model.gradients();
  for (std::size_t id : chunks) {
    const topo::KvChunk& chunk = placement_.chunks()[id];
    const auto values = gradients.subspan(chunk.offset, chunk.size);
    if (chunk.owner == ctx_.rank) {
      accept_push(ctx_.rank, id, round, float_view(values));
    } else {
      if (auto error = channel_.send(
              chunk.owner, net::Message{push_stage_, static_cast<std::uint16_t>(ps::Kind::kGradientChunk),
                                        id, round, float_view(values)})) {
        throw *error;
      }
    }
  }
}

void PoseidonStage::accept_push(std::size_t from, std::size_t chunk, std::uint64_t round,
                                net::Payload payload) {
  std::string why;
  switch (shard_.push(from, chunk, round, std::move(payload), &why)) {
    case KvShard::PushResult::kAccepted:
      break;
    case KvShard::PushResult::kReady:
      if (from == ctx_.rank) {
        reduce_and_broadcast(chunk, round);  // already on a network task
      } else {
        ctx_.executor.post(engine::Arena::kNetwork,
                           [this, chunk, round] { reduce_and_broadcast(chunk, round); });
      }
      break;
    case KvShard::PushResult::kRejected:
      channel_.reject(from, push_stage_, why);
      break;
  }
}

void PoseidonStage::reduce_and_broadcast(std::size_t chunk, std::uint64_t round) {
  const std::span<const float> values = shard_.reduce(chunk);
  throw_first(channel_.broadcast(net::Message{broadcast_stage_,
                                              static_cast<std::uint16_t>(ps::Kind::kParameterChunk),
                                              chunk, round, float_view(values)}));
  apply_parameters(chunk, round, values, ctx_.rank);
}

void PoseidonStage::apply_parameters(std::size_t chunk, std::uint64_t round,
                                     std::span<const float> values, std::size_t from) {
  const topo::KvChunk& info = placement_.chunks()[chunk];
  std::memcpy(ctx_.model.parameters().data() + info.offset, values.data(),
              info.size * sizeof(float));
  if (!arrivals_.arrive(info.layer, round)) {
    channel_.reject(from, broadcast_stage_,
                    "parameters of chunk " + std::to_string(chunk) + " for round " +
                        std::to_string(round) + " were not expected");
  }
}

// ---- messages and failures (loop thread) ----

void PoseidonStage::on_push(std::size_t from, net::Message&& message) {
  if (message.kind != static_cast<std::uint16_t>(ps::Kind::kGradientChunk) ||
      message.key >= placement_.chunks().size()) {
    channel_.reject(from, push_stage_, "kind " + std::to_string(message.kind) + ", chunk " +
                                           std::to_string(message.key) + ": not a gradient chunk");
    return;
  }
  accept_push(from, message.key, message.round, std::move(message.payload));
}

void PoseidonStage::on_parameters(std::size_t from, net::Message&& message) {
  if (message.kind != static_cast<std::uint16_t>(ps::Kind::kParameterChunk) ||
      message.key >= placement_.chunks().size()) {
    channel_.reject(from, broadcast_stage_, "kind " + std::to_string(message.kind) + ", chunk " +
                                                std::to_string(message.key) +
                                                ": not a parameter chunk");
    return;
  }
  const topo::KvChunk& info = placement_.chunks()[message.key];
  if (info.owner != from || message.payload.size() != info.size * sizeof(float)) {
    channel_.reject(from, broadcast_stage_,
                    "parameters of chunk " + std::to_string(message.key) +
                        " from a non-owner or of " + std::to_string(message.payload.size()) +
                        " bytes (expected " + std::to_string(info.size * sizeof(float)) +
                        " from rank " + std::to_string(info.owner) + ")");
    return;
  }
  apply_parameters(message.key, message.round, message.payload.as<float>(), from);
}

void PoseidonStage::on_factors(std::size_t from, net::Message&& message) {
  if (message.kind != static_cast<std::uint16_t>(sfb::Kind::kSufficientFactors) ||
      message.key >= sfb_.size() || !sfb_[message.key]) {
    channel_.reject(from, sfb_stage_, "kind " + std::to_string(message.kind) + ", layer " +
                                          std::to_string(message.key) +
                                          ": not the factors of an SFB layer");
    return;
  }
  std::string why;
  if (!sfb_[message.key]->store(from, message.round, std::move(message.payload), &why)) {
    channel_.reject(from, sfb_stage_, "layer " + std::to_string(message.key) + ": " + why);
  }
}

void PoseidonStage::on_failure(const PeerError& error) {
  const auto e = std::make_exception_ptr(error);
  arrivals_.fail_all(e);
  for (auto& layer : sfb_) {
    if (layer) layer->fail_all(e);
  }
}

// ---- plan ----

std::vector<LayerPlan> PoseidonStage::plan() const {
  // Every PS and SFB frame carries the same header fields, so one figure serves both.
  const double overhead =
      frame_overhead_bytes(stage_id(ps::kPushStage), static_cast<std::uint16_t>(ps::Kind::kGradientChunk));
  const double peers = static_cast<double>(ctx_.nodes - 1);
  std::vector<LayerPlan> rows;
  for (std::size_t l = 0; l < ctx_.model.num_layers(); ++l) {
    auto& layer = ctx_.model.layer(l);
    LayerPlan row = describe_layer(ctx_.model, l, topo::to_string(schemes_[l]));
    if (row.parameters == 0) {
      rows.push_back(std::move(row));
      continue;
    }
    const std::size_t m = layer.output_size(), n = layer.input_size();
    row.ps_floats = topo::ps_floats(m, n, ctx_.nodes, ctx_.nodes);
    row.sfb_floats = has_factors(layer) ? topo::sfb_floats(ctx_.batch_size, m, n, ctx_.nodes) : 0.0;
    double bytes = 0;
    if (sfb_[l]) {
      bytes = peers * (static_cast<double>(sfb_[l]->factor_bytes()) + overhead);
    } else {
      // Pushes to remote owners, plus (n - 1) copies of each chunk this node owns. Over all nodes
      // this averages Poseidon's 2MN(P1 + P2 - 2)/P2 floats per node (ATC'17 Table 1, P1 = P2 = n).
      const auto chunks = placement_.chunks_of_layer(l);
      row.chunks = chunks.size();
      for (std::size_t id : chunks) {
        const topo::KvChunk& chunk = placement_.chunks()[id];
        const double frame = static_cast<double>(chunk.size * sizeof(float)) + overhead;
        bytes += chunk.owner == ctx_.rank ? frame * peers : frame;
      }
    }
    row.predicted_bytes_sent = ctx_.nodes > 1 ? bytes : 0.0;
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace gradmesh::sync
