#include "sync/ps/ps_scheme.h"

#include <algorithm>
#include <cstring>

#include "engine/error.h"
#include "sync/ps/messages.h"
#include "tasks/optim/non_finite.h"
#include "topo/cost_model.h"

namespace gradmesh::sync {

namespace {

/// The compressor of compressed PS named `method`: a dense one (every entry of a chunk sent, so
/// the owner's change reaches every replica), not the identity. Throws ConfigError for an
/// unknown name, ContractError for another kind.
const compress::CompressorEntry& coded_entry(std::string_view method) {
  const compress::CompressorEntry& entry = compress::compressor_entry(method);
  GRADMESH_CHECK(entry.traits.dense && !entry.traits.lossless,
                 "compressed PS: a dense compressor, not " + entry.name);
  return entry;
}

/// Compressed PS's compressor of `wire` ("none": floats, nullptr).
const compress::CompressorEntry* wire_entry(std::string_view wire) {
  return wire == kNoCompression ? nullptr : &coded_entry(wire);
}

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
constexpr auto kCodedGradient = static_cast<std::uint16_t>(ps::Kind::kCodedGradientChunk);
constexpr auto kParameterDelta = static_cast<std::uint16_t>(ps::Kind::kParameterDelta);

/// The bytes of one chunk of `floats` floats on `wire` (nullptr: floats).
std::size_t chunk_bytes(const compress::CompressorEntry* wire, std::size_t floats) {
  if (wire == nullptr) return floats * sizeof(float);
  return floats == 0 ? 0 : wire->encoded_bytes(floats, compress::CompressorParams{});
}

}  // namespace

std::string ps_coded_scheme_id(std::string_view method) {
  return compress::compressed_scheme_id(topo::kPsScheme, method);
}

topo::SchemeModel ps_coded_scheme_model(std::string_view method) {
  const compress::CompressorEntry& entry = coded_entry(method);
  topo::SchemeModel m = topo::ps_scheme_model();
  m.compressed = true;
  m.id = ps_coded_scheme_id(entry.name);
  m.cost = [&entry](const topo::SchemeCostInput& in, const topo::LayerProfile& layer) {
    const std::size_t floats = layer.parameters,
                      size = std::max<std::size_t>(1, in.kv_chunk_floats);
    const double payload =
        static_cast<double>(floats / size) * static_cast<double>(chunk_bytes(&entry, size)) +
        static_cast<double>(chunk_bytes(&entry, floats % size));
    topo::SchemeCost cost = topo::ps_cost(in.cluster, floats, size, payload);
    if (in.cluster.nodes == 1 || floats == 0) return cost;
    const auto n = static_cast<double>(in.cluster.nodes);
    const topo::CodecSeconds codec = layer.codec.value_or(topo::CodecSeconds{
        entry.cost.encode_steps * static_cast<double>(floats) * in.cluster.step_seconds_per_float,
        entry.cost.decode_steps * static_cast<double>(floats) * in.cluster.step_seconds_per_float});
    // A node encodes the (n - 1)/n of the layer it pushes once the layer's backward has ended:
    // that is work on the cores the layers below compute on, before the push (encode_seconds;
    // it writes each chunk as it is encoded, but the owners wait for every node's pushes, the
    // last one's encoded last). The owner's change (1/n of the layer) is encoded and the chunks
    // decoded as they arrive, so that CPU and the link work as a pipeline of the layer's chunks:
    // the longer of the two bounds the pair, and the other adds one chunk's share (its last
    // decode). What comes after the link is that CPU's excess over it and that share.
    cost.encode_seconds = codec.encode * (n - 1.0) / n;
    const double cpu = codec.encode / n + codec.decode * (2.0 * n - 1.0) / n;
    const auto chunks =
        static_cast<double>(std::max<std::size_t>(1, topo::chunks_of(floats, size)));
    const double after =
        std::max(0.0, cpu - cost.comm_seconds) + std::min(cpu, cost.comm_seconds) / chunks;
    cost.codec_seconds = cost.encode_seconds + after;
    cost.compute_seconds += after;
    return cost;
  };
  m.lanes = {{std::string(ps::kCodedPushLane), 0.5}, {std::string(ps::kCodedBroadcastLane), 0.5}};
  return m;
}

PsScheme::PsScheme(const SyncContext& ctx, LaneRouter& router,
                   const std::vector<std::size_t>& layers, std::size_t chunk_floats,
                   std::string_view wire, std::uint64_t start_iteration)
    : ctx_(ctx),
      router_(router),
      wire_(wire_entry(wire)),
      start_iteration_(start_iteration),
      placement_(placement_for(ctx, layers, chunk_floats)),
      push_lane_(router.route(
          coded() ? ps::kCodedPushLane : ps::kPushLane,
          [this](std::size_t from, net::Message&& m) { on_push(from, std::move(m)); })),
      broadcast_lane_(router.route(
          coded() ? ps::kCodedBroadcastLane : ps::kBroadcastLane,
          [this](std::size_t from, net::Message&& m) { on_parameters(from, std::move(m)); })),
      shard_(placement_, ctx.rank, ctx.model.parameters(), ctx.optimizer, wire),
      arrivals_(ctx.model.num_layers()) {
  if (!coded()) return;
  coded_.resize(placement_.chunks().size());
  const compress::CompressorParams params{.seed = 0, .rank = ctx_.rank};
  for (const topo::KvChunk& chunk : placement_.chunks()) {
    CodedChunk& c = coded_[chunk.id];
    const bool owned = chunk.owner == ctx_.rank;
    const bool on_device = !owned && ctx_.model.on_device() &&
                           chunk.size >= kMinDeviceChunkFloats &&
                           compress::DeviceCodec::supports(wire_->name);
    device_pushes_ = device_pushes_ || on_device;
    c.codec =
        std::make_unique<compress::Codec>(wire_->name, chunk.size, params, !owned && !on_device);
    if (on_device) {
      c.device_codec = std::make_unique<compress::DeviceCodec>(ctx_.model.backend(), wire_->name,
                                                               chunk.size, params, true);
    }
    c.wire.resize(c.codec->encoded_bytes());
    if (owned) c.change.resize(chunk.size);
  }
  const std::size_t count = ctx_.model.num_layers();
  done_.assign(count, 0);
  figures_.resize(count);
  names_.resize(count);
  for (std::size_t l = 0; l < count; ++l) {
    names_[l] = ctx_.model.layer_name(l);
  }
}

void PsScheme::build(engine::Graph& graph, const IterationTasks& tasks) {
  for (std::size_t l = 0; l < ctx_.model.num_layers(); ++l) {
    if (placement_.chunks_of_layer(l).empty()) continue;
    const std::string suffix = "_" + std::to_string(l);
    // Device encodes use the Model's device stream: on the Model's thread (as SFB's tasks).
    const engine::Arena arena = device_pushes() ? engine::Arena::kCompute : engine::Arena::kNetwork;
    auto push = graph.emplace("push" + suffix, arena,
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

std::string PsScheme::describe(std::size_t layer) const {
  (void)layer;
  return coded() ? "PS " + compress::describe_compressor(*wire_, {}) : std::string("PS");
}

std::size_t PsScheme::chunks(std::size_t layer) const {
  return placement_.chunks_of_layer(layer).size();
}

double PsScheme::bytes_sent(std::size_t layer) const {
  if (ctx_.nodes < 2) return 0;
  const double push_overhead =
      frame_overhead_bytes(push_lane_, coded() ? kCodedGradient : kGradient);
  const double broadcast_overhead =
      frame_overhead_bytes(broadcast_lane_, coded() ? kParameterDelta : kParameters);
  const double peers = static_cast<double>(ctx_.nodes - 1);
  double bytes = 0;
  for (std::size_t id : placement_.chunks_of_layer(layer)) {
    const topo::KvChunk& chunk = placement_.chunks()[id];
    const auto payload = static_cast<double>(chunk_bytes(wire_, chunk.size));
    bytes +=
        chunk.owner == ctx_.rank ? (payload + broadcast_overhead) * peers : payload + push_overhead;
  }
  return bytes;
}

void PsScheme::epoch_figures(std::map<std::string, double>& out) {
  const std::lock_guard lock(figures_mutex_);
  for (std::size_t l = 0; l < figures_.size(); ++l) figures_[l].flush(names_[l], out);
}

void PsScheme::save_state(engine::StateWriter& out) {
  if (!coded()) return;
  const bool differs = master_differs_.load();
  out.write_u64(differs ? 1 : 0);
  if (differs) out.write_floats(shard_.master());
  out.write_u64s(done_);
  for (const topo::KvChunk& chunk : placement_.chunks()) {
    if (chunk.owner != ctx_.rank) coded_[chunk.id].residual_owner().save_state(out);
  }
}

void PsScheme::load_state(engine::StateReader& in) {
  shard_.reload(ctx_.model.parameters());
  if (!coded()) return;
  const bool differs = in.read_u64() != 0;
  if (differs) in.read_floats(shard_.master());
  master_differs_ = differs;
  std::vector<std::uint64_t> done = in.read_u64s();
  if (done.size() != done_.size()) {
    throw CheckpointError(in.source() + ": compressed PS state of " + std::to_string(done.size()) +
                          " layers, expected " + std::to_string(done_.size()));
  }
  done_ = std::move(done);
  for (const topo::KvChunk& chunk : placement_.chunks()) {
    if (chunk.owner != ctx_.rank) coded_[chunk.id].residual_owner().load_state(in);
  }
}

void PsScheme::push_layer(std::size_t layer, std::uint64_t round) {
  const auto chunks = placement_.chunks_of_layer(layer);
  arrivals_.expect(layer, round, chunks.size());
  const std::span<const float> gradients = ctx_.model.gradients();
  const bool encode = coded() && done_[layer]++ >= start_iteration_;
  compress::EncodeStats layer_stats;
  for (std::size_t id : chunks) {
    const topo::KvChunk& chunk = placement_.chunks()[id];
    const auto values = gradients.subspan(chunk.offset, chunk.size);
    if (chunk.owner == ctx_.rank) {
      accept_push(ctx_.rank, id, round, float_view(values), false);
      continue;
    }
    net::Message message{push_lane_, kGradient,          id,
                         round,      float_view(values), static_cast<std::uint32_t>(layer)};
    if (encode) {
      // The buffer is free again: its last send reached the owner before the owner's broadcast,
      // which this layer's pull waited for.
      CodedChunk& c = coded_[id];
      const compress::EncodeStats stats =
          c.device_codec
              ? c.device_codec->encode(ctx_.model.device_layer_gradients(layer).data() +
                                           (chunk.offset - ctx_.model.parameter_offset(layer)),
                                       c.wire, 0)
              : c.codec->encode(values, c.wire, 0);
      layer_stats.gradient_norm2 += stats.gradient_norm2;
      layer_stats.input_norm2 += stats.input_norm2;
      layer_stats.error_norm2 += stats.error_norm2;
      message.kind = kCodedGradient;
      message.payload = net::Payload::view(std::span<const std::byte>(c.wire));
    }
    if (auto error = router_.send(chunk.owner, std::move(message))) throw *error;
  }
  if (encode) {  // with error feedback the residual is the compression error
    const std::lock_guard lock(figures_mutex_);
    figures_[layer].add(layer_stats.input_norm2, layer_stats.error_norm2, layer_stats.error_norm2,
                        layer_stats.gradient_norm2);
  }
}

void PsScheme::accept_push(std::size_t from, std::size_t chunk, std::uint64_t round,
                           net::Payload payload, bool coded) {
  std::string why;
  const KvShard::PushResult result =
      coded ? shard_.push_coded(from, chunk, round, std::move(payload), &why)
            : shard_.push(from, chunk, round, std::move(payload), &why);
  switch (result) {
    case KvShard::PushResult::kAccepted:
      break;
    case KvShard::PushResult::kReady:
      if (from == ctx_.rank && !device_pushes()) {
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

std::span<float> PsScheme::replica(std::size_t chunk) const {
  const topo::KvChunk& info = placement_.chunks()[chunk];
  // The chunk's layer only: its host copy becomes the current one (uploaded before its forward),
  // and no other layer's device copy is touched (an SFB layer's may be the current one).
  return ctx_.model.layer_parameters(info.layer)
      .subspan(info.offset - ctx_.model.parameter_offset(info.layer), info.size);
}

void PsScheme::reduce_and_broadcast(std::size_t chunk, std::uint64_t round) {
  bool pushes_coded = false;
  const std::span<const float> values = shard_.reduce(chunk, &pushes_coded);
  const auto layer = static_cast<std::uint32_t>(placement_.chunks()[chunk].layer);
  const std::span<float> mine = replica(chunk);
  if (!pushes_coded) {  // the parameters themselves (uncompressed PS, a warm-up iteration)
    throw_first(router_.broadcast(
        net::Message{broadcast_lane_, kParameters, chunk, round, float_view(values), layer}));
    std::copy(values.begin(), values.end(), mine.begin());
  } else {
    // d = master - replica, encoded; every replica (this one too) adds D(C(d)). The encoding's
    // buffer is free: the last broadcast of this chunk reached every peer before the pushes that
    // made this round ready.
    CodedChunk& c = coded_[chunk];
    for (std::size_t i = 0; i < c.change.size(); ++i) c.change[i] = values[i] - mine[i];
    (void)c.codec->encode(c.change, c.wire, 0);
    master_differs_ = true;
    throw_first(router_.broadcast(
        net::Message{broadcast_lane_, kParameterDelta, chunk, round,
                     net::Payload::view(std::span<const std::byte>(c.wire)), layer}));
    c.codec->decode_add(c.wire, mine, 0);
  }
  arrive(chunk, round, ctx_.rank);
}

void PsScheme::arrive(std::size_t chunk, std::uint64_t round, std::size_t from) {
  if (!arrivals_.arrive(placement_.chunks()[chunk].layer, round)) {
    router_.reject(from, broadcast_lane_,
                   "parameters of chunk " + std::to_string(chunk) + " for round " +
                       std::to_string(round) + " were not expected");
  }
}

void PsScheme::on_push(std::size_t from, net::Message&& message) {
  const bool is_coded = message.kind == kCodedGradient && coded();
  if ((message.kind != kGradient && !is_coded) || message.key >= placement_.chunks().size()) {
    router_.reject(from, push_lane_,
                   "kind " + std::to_string(message.kind) + ", chunk " +
                       std::to_string(message.key) + ": not a gradient chunk");
    return;
  }
  accept_push(from, message.key, message.round, std::move(message.payload), is_coded);
}

void PsScheme::on_parameters(std::size_t from, net::Message&& message) {
  const bool is_delta = message.kind == kParameterDelta && coded();
  if ((message.kind != kParameters && !is_delta) || message.key >= placement_.chunks().size()) {
    router_.reject(from, broadcast_lane_,
                   "kind " + std::to_string(message.kind) + ", chunk " +
                       std::to_string(message.key) + ": not a parameter chunk");
    return;
  }
  const topo::KvChunk& info = placement_.chunks()[message.key];
  const std::size_t expected =
      is_delta ? coded_[info.id].codec->encoded_bytes() : info.size * sizeof(float);
  if (info.owner != from || info.owner == ctx_.rank || message.payload.size() != expected) {
    router_.reject(from, broadcast_lane_,
                   "parameters of chunk " + std::to_string(message.key) +
                       " from a non-owner or of " + std::to_string(message.payload.size()) +
                       " bytes (expected " + std::to_string(expected) + " from rank " +
                       std::to_string(info.owner) + ")");
    return;
  }
  const std::span<float> mine = replica(message.key);
  // The non-finite guard (tasks/optim/non_finite.h): the owner's step checked its master copy; a
  // replica checks what it received, fused with the copy (a coded change: one pass after it).
  bool finite = true;
  if (is_delta) {
    try {
      coded_[info.id].codec->decode_add(message.payload.bytes(), mine, 0);
    } catch (const ProtocolError& e) {
      router_.reject(from, broadcast_lane_,
                     "parameter change of chunk " + std::to_string(message.key) + ": " + e.what());
      return;
    }
    finite = tasks::all_finite(mine);
  } else {
    finite = tasks::copy_finite(message.payload.as<float>(), mine);
  }
  if (!finite) {
    ctx_.optimizer.non_finite().report(
        info.offset, mine,
        "the parameters received from rank " + std::to_string(from) + " (the chunk's KV shard)");
  }
  arrive(message.key, message.round, from);
}

}  // namespace gradmesh::sync
