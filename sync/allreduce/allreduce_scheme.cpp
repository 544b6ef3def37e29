#include "sync/allreduce/allreduce_scheme.h"

#include "engine/error.h"
#include "sync/allreduce/messages.h"
#include "sync/compress/compressor.h"
#include "topo/cost_model.h"
#include "topo/planner.h"

namespace gradmesh::sync {

namespace {
/// Bytes a float of `segment`'s encoding, and bytes a message beside them (fp16's and bf16's
/// scale: 2 and 4).
double bytes_per_float(const collective::SegmentCodec& segment) {
  return static_cast<double>(segment.encoded_bytes(1) - segment.encoded_bytes(0));
}
double bytes_per_message(const collective::SegmentCodec& segment) {
  return static_cast<double>(segment.encoded_bytes(0));
}
/// Conversions over the ring (RingAllReduce, 16 bits), seconds per float of the bucket: each float
/// is encoded once (the reduce-scatter's partial sums, (n - 1)/n, and the owner's full sum, 1/n)
/// and decoded 2 (n - 1)/n times (reduce-scatter adds, all-gather stores).
double conversion_seconds(const topo::ClusterCost& cluster) {
  const auto n = static_cast<double>(cluster.nodes);
  return cluster.half_encode_seconds() + 2.0 * (n - 1.0) / n * cluster.half_decode_seconds();
}
}  // namespace

std::string allreduce_segment_scheme_id(std::string_view method) {
  return compress::compressed_scheme_id(topo::kAllReduceScheme, method);
}

topo::SchemeModel allreduce_segment_scheme_model(std::string_view method) {
  const collective::SegmentCodec& segment =
      compress::segment_format(method, "allreduce_segment_scheme_model");
  topo::SchemeModel m = topo::allreduce_scheme_model();
  m.compressed = true;
  m.id = allreduce_segment_scheme_id(method);
  m.cost = [&segment](const topo::SchemeCostInput& in, const topo::LayerProfile& layer) {
    topo::SchemeCost cost = topo::allreduce_cost(in.cluster, layer.parameters);
    if (in.cluster.nodes == 1 || layer.parameters == 0) return cost;
    const double bytes = bytes_per_float(segment) * static_cast<double>(layer.parameters);
    const double h = in.cluster.frame_overhead_bytes + bytes_per_message(segment);
    cost.bytes_sent = topo::ring_allreduce_bytes(bytes, in.cluster.nodes, h);
    cost.comm_seconds =
        topo::ring_allreduce_cost(in.cluster.link, in.cluster.nodes, h).seconds(bytes);
    cost.codec_seconds = conversion_seconds(in.cluster) * static_cast<double>(layer.parameters);
    cost.compute_seconds += cost.codec_seconds;
    return cost;
  };
  m.bucket_bytes = [&segment](const topo::LayerProfile& layer) {
    return bytes_per_float(segment) * static_cast<double>(layer.parameters);
  };
  m.lanes = {{std::string(allreduce::kHalfLane), 1.0}};
  return m;
}

AllReduceScheme::AllReduceScheme(const SyncContext& ctx, LaneRouter& router,
                                 const std::vector<std::pair<std::size_t, std::size_t>>& buckets,
                                 const collective::SegmentCodec* wire)
    : ctx_(ctx),
      router_(router),
      wire_(wire),
      lane_(router.route(
          wire == nullptr ? allreduce::kLane : allreduce::kHalfLane,
          [this](std::size_t from, net::Message&& m) { on_message(from, std::move(m)); })) {
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const auto [first, last] = buckets[i];
    Bucket b;
    b.index = i;
    b.first = first;
    b.last = last;
    b.offset = ctx_.model.parameter_offset(first);
    b.floats = ctx_.model.parameter_offset(last + 1) - b.offset;
    if (b.floats == 0) continue;
    b.ring = std::make_unique<collective::RingAllReduce>(
        router_, lane_, static_cast<std::uint32_t>(buckets_.size()), b.floats,
        static_cast<std::uint32_t>(first), wire_);
    buckets_.push_back(std::move(b));
  }
}

std::size_t AllReduceScheme::bucket_of(std::size_t layer) const noexcept {
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    if (buckets_[i].first <= layer && layer <= buckets_[i].last) return i;
  }
  return buckets_.size();
}

double AllReduceScheme::bytes_sent(std::size_t layer) const {
  const std::size_t i = bucket_of(layer);
  if (i == buckets_.size()) return 0;
  const std::size_t n = router_.nodes();
  const double floats = static_cast<double>(ctx_.model.layer_parameters(layer).size());
  double bytes =
      topo::ring_allreduce_bytes((wire_ != nullptr ? bytes_per_float(*wire_) : 4.0) * floats, n);
  if (layer == buckets_[i].first) {
    const double overhead = frame_overhead_bytes(
        lane_, static_cast<std::uint16_t>(collective::RingKind::kReduceScatter));
    bytes += topo::ring_allreduce_bytes(
        0, n, overhead + (wire_ != nullptr ? bytes_per_message(*wire_) : 0.0));
  }
  return bytes;
}

std::string AllReduceScheme::describe(std::size_t layer) const {
  const std::size_t i = bucket_of(layer);
  const std::string wire = wire_ == nullptr ? std::string() : std::string(wire_->name()) + " ";
  return "allreduce " + wire + "b" + std::to_string(i == buckets_.size() ? 0 : buckets_[i].index);
}

void AllReduceScheme::build(engine::Graph& graph, const IterationTasks& tasks) {
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    const std::string suffix = "_" + std::to_string(i);
    auto start = graph.emplace(
        "ar_start" + suffix, engine::Arena::kNetwork, [this, &b](engine::TaskContext& t) {
          b.ring->start(t.run(), ctx_.model.gradients().subspan(b.offset, b.floats));
        });
    auto wait = graph.emplace("ar_wait" + suffix, engine::Arena::kNetwork,
                              [&b](engine::TaskContext& t) { b.ring->await(t.run(), t.defer()); });
    auto apply_task = graph.emplace("ar_apply" + suffix, engine::Arena::kNetwork,
                                    [this, &b](engine::TaskContext& t) { apply(b, t.run()); });
    for (std::size_t l = b.first; l <= b.last; ++l) tasks.backward[l].precede(start);
    start.precede(wait);
    wait.precede(apply_task);
    apply_task.precede(tasks.done);
  }
}

void AllReduceScheme::fail_all(std::exception_ptr error) {
  for (Bucket& b : buckets_) b.ring->fail_all(error);
}

void AllReduceScheme::apply(const Bucket& bucket, std::uint64_t round) {
  // The mean over the n nodes' batches; the gradient buffer (no longer sent) takes it.
  const std::span<const float> sum = bucket.ring->result(round);
  const float scale = 1.0f / static_cast<float>(ctx_.nodes);
  for (std::size_t l = bucket.first; l <= bucket.last; ++l) {
    const std::size_t offset = ctx_.model.parameter_offset(l);
    const std::span<float> params = ctx_.model.layer_parameters(l);
    if (params.empty()) continue;
    const std::span<const float> grads[1] = {sum.subspan(offset - bucket.offset, params.size())};
    ctx_.optimizer.step_sum(offset, params, grads, scale, ctx_.model.layer_gradients(l));
  }
}

void AllReduceScheme::on_message(std::size_t from, net::Message&& message) {
  const std::uint64_t bucket = message.key >> 32;
  if (bucket >= buckets_.size()) {
    router_.reject(from, lane_, "unknown bucket " + std::to_string(bucket));
    return;
  }
  buckets_[bucket].ring->on_message(from, std::move(message));
}

}  // namespace gradmesh::sync
