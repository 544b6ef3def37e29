#include "sync/ps/ps_stage.h"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "net/transport.h"
#include "sync/stages.h"

namespace gradmesh::sync {

namespace {

std::size_t chunk_floats_for(const SyncContext& ctx, std::size_t total_floats) {
  if (ctx.options.ps.chunk_bytes) {
    return std::max<std::size_t>(1, *ctx.options.ps.chunk_bytes / sizeof(float));
  }
  return topo::KvPlacement::auto_chunk_floats(total_floats, ctx.nodes);
}

net::Payload float_view(std::span<const float> values) {
  return net::Payload::view(std::as_bytes(values));
}

}  // namespace

std::vector<topo::ParameterBlock> parameter_blocks(tasks::Model& model) {
  std::vector<topo::ParameterBlock> blocks;
  for (std::size_t l = 0; l < model.num_layers(); ++l) {
    const std::size_t size = model.layer(l).parameter_count();
    if (size > 0) blocks.push_back({l, model.parameter_offset(l), size});
  }
  return blocks;
}

PsStage::PsStage(SyncContext context)
    : ctx_(std::move(context)),
      placement_(parameter_blocks(ctx_.model), ctx_.nodes,
                 chunk_floats_for(ctx_, ctx_.model.parameter_count())),
      shard_(placement_, ctx_.rank, ctx_.model.parameters(), tasks::Sgd(ctx_.sgd)),
      arrivals_(ctx_.model.num_layers()) {
  // Without a transport (one node, or `gradmesh-node plan`) every chunk is local.
  if (ctx_.transport != nullptr) {
    ctx_.transport->set_handlers(
        [this](std::size_t from, net::Message&& message) { on_message(from, std::move(message)); },
        [this](const PeerError& error) { arrivals_.fail_all(std::make_exception_ptr(error)); });
  }
}

void PsStage::build(engine::Graph& graph, const IterationTasks& tasks) {
  for (std::size_t l = 0; l < ctx_.model.num_layers(); ++l) {
    if (placement_.chunks_of_layer(l).empty()) continue;
    auto push = graph.emplace("push_" + std::to_string(l), engine::Arena::kNetwork,
                              [this, l](engine::TaskContext& ctx) { push_layer(l, ctx.run()); });
    auto pull = graph.emplace("pull_" + std::to_string(l), engine::Arena::kNetwork,
                              [this, l](engine::TaskContext& ctx) {
                                arrivals_.await(l, ctx.run(), ctx.defer());
                              });
    tasks.backward[l].precede(push);
    push.precede(pull);
    pull.precede(tasks.done);
  }
}

void PsStage::push_layer(std::size_t layer, std::uint64_t round) {
  const auto chunks = placement_.chunks_of_layer(layer);
  arrivals_.expect(layer, round, chunks.size());
  const std::span<const float> gradients = ctx_.model.gradients();
  for (std::size_t id : chunks) {
    const topo::KvChunk& chunk = placement_.chunks()[id];
    const auto values = gradients.subspan(chunk.offset, chunk.size);
    if (chunk.owner == ctx_.rank) {
      accept_push(ctx_.rank, id, round, float_view(values));
    } else {
      ctx_.transport->send(chunk.owner,
                           net::Message{static_cast<std::uint8_t>(Stage::kKvPush),
                                        static_cast<std::uint16_t>(MessageKind::kGradientChunk),
                                        id, round, float_view(values)});
    }
  }
}

void PsStage::accept_push(std::size_t from, std::size_t chunk, std::uint64_t round,
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
      reject(from, why);
      break;
  }
}

void PsStage::reduce_and_broadcast(std::size_t chunk, std::uint64_t round) {
  const std::span<const float> values = shard_.reduce(chunk);
  for (std::size_t peer = 0; peer < ctx_.nodes; ++peer) {
    if (peer == ctx_.rank) continue;
    ctx_.transport->send(peer, net::Message{static_cast<std::uint8_t>(Stage::kKvBroadcast),
                                            static_cast<std::uint16_t>(MessageKind::kParameterChunk),
                                            chunk, round, float_view(values)});
  }
  apply_parameters(chunk, round, values, ctx_.rank);
}

void PsStage::apply_parameters(std::size_t chunk, std::uint64_t round,
                               std::span<const float> values, std::size_t from) {
  const topo::KvChunk& info = placement_.chunks()[chunk];
  std::memcpy(ctx_.model.parameters().data() + info.offset, values.data(),
              info.size * sizeof(float));
  if (!arrivals_.arrive(info.layer, round)) {
    reject(from, "parameters of chunk " + std::to_string(chunk) + " for round " +
                     std::to_string(round) + " were not expected");
  }
}

void PsStage::on_message(std::size_t from, net::Message&& message) {
  const std::size_t chunk = message.key;
  if (chunk >= placement_.chunks().size()) {
    reject(from, "unknown KV chunk " + std::to_string(chunk));
    return;
  }
  switch (static_cast<MessageKind>(message.kind)) {
    case MessageKind::kGradientChunk:
      accept_push(from, chunk, message.round, std::move(message.payload));
      return;
    case MessageKind::kParameterChunk: {
      const topo::KvChunk& info = placement_.chunks()[chunk];
      if (info.owner != from || message.payload.size() != info.size * sizeof(float)) {
        reject(from, "parameters of chunk " + std::to_string(chunk) + " from a non-owner or of " +
                         std::to_string(message.payload.size()) + " bytes (expected " +
                         std::to_string(info.size * sizeof(float)) + " from rank " +
                         std::to_string(info.owner) + ")");
        return;
      }
      apply_parameters(chunk, message.round, message.payload.as<float>(), from);
      return;
    }
  }
  reject(from, "unknown message kind " + std::to_string(message.kind));
}

void PsStage::reject(std::size_t from, const std::string& why) {
  rejected_.fetch_add(1, std::memory_order_relaxed);
  spdlog::warn("ps: rejected a message from rank {}: {}", from, why);
}

std::vector<LayerPlan> PsStage::plan() const {
  std::vector<LayerPlan> rows;
  for (std::size_t l = 0; l < ctx_.model.num_layers(); ++l) {
    auto& layer = ctx_.model.layer(l);
    LayerPlan row;
    row.layer = l;
    row.name = std::string(layer.kind()) + std::to_string(l);
    row.shape = std::to_string(layer.output_size()) + "x" + std::to_string(layer.input_size());
    row.parameters = layer.parameter_count();
    const auto chunks = placement_.chunks_of_layer(l);
    row.chunks = chunks.size();
    row.scheme = row.parameters == 0 ? "-" : "PS";
    // Payload bytes this node sends per iteration: its pushes to remote owners, plus (n - 1)
    // copies of each chunk it owns. Over all nodes this is Poseidon's 2MN(P1 + P2 - 2)/P2 floats
    // per node on average (ATC'17 Table 1, P1 = P2 = n).
    double bytes = 0;
    for (std::size_t id : chunks) {
      const topo::KvChunk& chunk = placement_.chunks()[id];
      const double chunk_bytes = static_cast<double>(chunk.size * sizeof(float));
      bytes += chunk.owner == ctx_.rank ? chunk_bytes * static_cast<double>(ctx_.nodes - 1)
                                        : chunk_bytes;
    }
    row.predicted_bytes_sent = ctx_.nodes > 1 ? bytes : 0.0;
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace gradmesh::sync
