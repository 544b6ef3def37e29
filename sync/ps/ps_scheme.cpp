#include "sync/ps/ps_scheme.h"

#include <algorithm>
#include <cstring>

#include "sync/ps/messages.h"

namespace gradmesh::sync {

namespace {

topo::KvPlacement placement_for(const SyncContext& ctx, const std::vector<std::size_t>& layers,
                                std::size_t chunk_floats) {
  std::vector<topo::ParameterBlock> blocks;
  for (std::size_t l : layers) {
    const std::size_t size = ctx.model.layer(l).parameter_count();
    if (size > 0) blocks.push_back({l, ctx.model.parameter_offset(l), size});
  }
  return topo::KvPlacement(blocks, ctx.nodes, std::max<std::size_t>(1, chunk_floats));
}

net::Payload float_view(std::span<const float> values) {
  return net::Payload::view(std::as_bytes(values));
}

constexpr auto kGradient = static_cast<std::uint16_t>(ps::Kind::kGradientChunk);
constexpr auto kParameters = static_cast<std::uint16_t>(ps::Kind::kParameterChunk);

}  // namespace

PsScheme::PsScheme(const SyncContext& ctx, LaneRouter& router,
                   const std::vector<std::size_t>& layers, std::size_t chunk_floats)
    : ctx_(ctx),
      router_(router),
      placement_(placement_for(ctx, layers, chunk_floats)),
      push_lane_(router.route(
          ps::kPushLane,
          [this](std::size_t from, net::Message&& m) { on_push(from, std::move(m)); })),
      broadcast_lane_(router.route(
          ps::kBroadcastLane,
          [this](std::size_t from, net::Message&& m) { on_parameters(from, std::move(m)); })),
      shard_(placement_, ctx.rank, ctx.model.parameters(), ctx.optimizer),
      arrivals_(ctx.model.num_layers()) {}

void PsScheme::build(engine::Graph& graph, const IterationTasks& tasks) {
  for (std::size_t l = 0; l < ctx_.model.num_layers(); ++l) {
    if (placement_.chunks_of_layer(l).empty()) continue;
    const std::string suffix = "_" + std::to_string(l);
    auto push = graph.emplace("push" + suffix, engine::Arena::kNetwork,
                              [this, l](engine::TaskContext& t) { push_layer(l, t.run()); });
    auto pull = graph.emplace(
        "pull" + suffix, engine::Arena::kNetwork,
        [this, l](engine::TaskContext& t) { arrivals_.await(l, t.run(), t.defer()); });
    tasks.backward[l].precede(push);
    push.precede(pull);
    pull.precede(tasks.done);
  }
}

void PsScheme::fail_all(std::exception_ptr error) { arrivals_.fail_all(std::move(error)); }

std::size_t PsScheme::chunks(std::size_t layer) const {
  return placement_.chunks_of_layer(layer).size();
}

double PsScheme::bytes_sent(std::size_t layer) const {
  if (ctx_.nodes < 2) return 0;
  const double overhead = frame_overhead_bytes(push_lane_, kGradient);
  const double peers = static_cast<double>(ctx_.nodes - 1);
  double bytes = 0;
  for (std::size_t id : placement_.chunks_of_layer(layer)) {
    const topo::KvChunk& chunk = placement_.chunks()[id];
    const double frame = static_cast<double>(chunk.size * sizeof(float)) + overhead;
    bytes += chunk.owner == ctx_.rank ? frame * peers : frame;
  }
  return bytes;
}

void PsScheme::push_layer(std::size_t layer, std::uint64_t round) {
  const auto chunks = placement_.chunks_of_layer(layer);
  arrivals_.expect(layer, round, chunks.size());
  const std::span<const float> gradients = ctx_.model.gradients();
  for (std::size_t id : chunks) {
    const topo::KvChunk& chunk = placement_.chunks()[id];
    const auto values = gradients.subspan(chunk.offset, chunk.size);
    if (chunk.owner == ctx_.rank) {
      accept_push(ctx_.rank, id, round, float_view(values));
    } else if (auto error = router_.send(
                   chunk.owner, net::Message{push_lane_, kGradient, id, round, float_view(values),
                                             static_cast<std::uint32_t>(layer)})) {
      throw *error;
    }
  }
}

void PsScheme::accept_push(std::size_t from, std::size_t chunk, std::uint64_t round,
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
      router_.reject(from, push_lane_, why);
      break;
  }
}

void PsScheme::reduce_and_broadcast(std::size_t chunk, std::uint64_t round) {
  const std::span<const float> values = shard_.reduce(chunk);
  throw_first(router_.broadcast(
      net::Message{broadcast_lane_, kParameters, chunk, round, float_view(values),
                   static_cast<std::uint32_t>(placement_.chunks()[chunk].layer)}));
  apply_parameters(chunk, round, values, ctx_.rank);
}

void PsScheme::apply_parameters(std::size_t chunk, std::uint64_t round,
                                std::span<const float> values, std::size_t from) {
  const topo::KvChunk& info = placement_.chunks()[chunk];
  // The chunk's layer only: its host copy becomes the current one (uploaded before its forward),
  // and no other layer's device copy is touched (an SFB layer's may be the current one).
  const std::span<float> layer = ctx_.model.layer_parameters(info.layer);
  std::memcpy(layer.data() + (info.offset - ctx_.model.parameter_offset(info.layer)), values.data(),
              info.size * sizeof(float));
  if (!arrivals_.arrive(info.layer, round)) {
    router_.reject(from, broadcast_lane_,
                   "parameters of chunk " + std::to_string(chunk) + " for round " +
                       std::to_string(round) + " were not expected");
  }
}

void PsScheme::on_push(std::size_t from, net::Message&& message) {
  if (message.kind != kGradient || message.key >= placement_.chunks().size()) {
    router_.reject(from, push_lane_,
                   "kind " + std::to_string(message.kind) + ", chunk " +
                       std::to_string(message.key) + ": not a gradient chunk");
    return;
  }
  accept_push(from, message.key, message.round, std::move(message.payload));
}

void PsScheme::on_parameters(std::size_t from, net::Message&& message) {
  if (message.kind != kParameters || message.key >= placement_.chunks().size()) {
    router_.reject(from, broadcast_lane_,
                   "kind " + std::to_string(message.kind) + ", chunk " +
                       std::to_string(message.key) + ": not a parameter chunk");
    return;
  }
  const topo::KvChunk& info = placement_.chunks()[message.key];
  if (info.owner != from || message.payload.size() != info.size * sizeof(float)) {
    router_.reject(from, broadcast_lane_,
                   "parameters of chunk " + std::to_string(message.key) +
                       " from a non-owner or of " + std::to_string(message.payload.size()) +
                       " bytes (expected " + std::to_string(info.size * sizeof(float)) +
                       " from rank " + std::to_string(info.owner) + ")");
    return;
  }
  apply_parameters(message.key, message.round, message.payload.as<float>(), from);
}

}  // namespace gradmesh::sync
