#pragma once
// Ring all-reduce on merged buckets, overlapped with backpropagation — what Horovod and PyTorch DDP
// do (MG-WFBP sec. II-D and IV).

#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sync/collective/ring_allreduce.h"
#include "sync/collective/segment_codec.h"
#include "sync/lane_router.h"
#include "sync/scheme.h"
#include "sync/sync_stage.h"

namespace gradmesh::sync {

/// The scheme id of all-reduce with every segment in compressor `method`'s segment format
/// ("allreduce_fp16"; issue 28). Pure.
[[nodiscard]] std::string allreduce_segment_scheme_id(std::string_view method);

/// All-reduce in a compressor's segment format as the planner sees it (`method` one with a
/// CompressorEntry::segment: fp16, bf16): bucketed like topo::allreduce_scheme_model, the
/// format's bytes a parameter in a bucket (2); a layer alone costs the ring of them with the
/// format's bytes a message (a 4-byte scale) in each message, and the conversions (each float
/// encoded once and decoded 2 (n - 1)/n times over the ring: RingAllReduce) at
/// ClusterCost::half_encode_seconds() and half_decode_seconds() each (measured at start-up, else
/// topo::kHalfEncodeSteps and kHalfDecodeSteps optimizer steps), on top of the step. Lane
/// allreduce_half. Throws ConfigError for an unknown compressor, ContractError for one without a
/// segment format.
[[nodiscard]] topo::SchemeModel allreduce_segment_scheme_model(std::string_view method);

/// One iteration, for each bucket (consecutive layers first..last, one of the plan's buckets):
/// ar_start_g (network task, after the backward task of every layer in the bucket) starts the
/// bucket's RingAllReduce on the layers' gradients — one contiguous slice of Model::gradients(), so
/// merging costs no copy; ar_wait_g (deferred: holds no thread) ends when the sum is back;
/// ar_apply_g steps each layer of the bucket with the node's optimizer on sum / n. The update
/// equals single-process SGD on the union of the n batches (mean loss), and every replica holds
/// the same bits (the ring's sums are the same on every rank). Needs n >= 2.
///
/// `wire` a segment format (a compressor's CompressorEntry::segment; fp16, bf16): the rings send
/// 16-bit segments (RingAllReduce) on the lane
/// allreduce_half, summing in fp32 at every step; the update is then the mean of the n gradients
/// to one rounding a hop, no longer single-process SGD bit for bit, and still the same bits on
/// every replica.
///
/// Errors and thread safety: as PsScheme.
class AllReduceScheme final : public Scheme {
 public:
  /// `buckets`: (first, last) layer ranges in any order. Routes the allreduce lane (or
  /// allreduce_half for a 16-bit `wire`).
  AllReduceScheme(const SyncContext& ctx, LaneRouter& router,
                  const std::vector<std::pair<std::size_t, std::size_t>>& buckets,
                  const collective::SegmentCodec* wire = nullptr);

  void build(engine::Graph& graph, const IterationTasks& tasks) override;
  void fail_all(std::exception_ptr error) override;
  [[nodiscard]] std::size_t buckets() const noexcept { return buckets_.size(); }
  /// Wire bytes this rank sends for layer l per iteration: its share of its bucket's ring,
  /// 2 (n - 1)/n of its floats (4 or 2 bytes each), plus the bucket's 2 (n - 1) frame overheads on
  /// the bucket's first layer (the one whose backward releases it), as the planner counts them.
  [[nodiscard]] double bytes_sent(std::size_t layer) const override;
  /// "allreduce b<i>" ("allreduce fp16 b<i>"): i the bucket's index in the order given (the
  /// plan's send order).
  [[nodiscard]] std::string describe(std::size_t layer) const override;

 private:
  struct Bucket {
    std::size_t index = 0;            // in the order given (the plan's)
    std::size_t first = 0, last = 0;  // layers
    std::size_t offset = 0, floats = 0;
    std::unique_ptr<collective::RingAllReduce> ring;
  };
  void apply(const Bucket& bucket, std::uint64_t round);
  /// The index of the bucket holding `layer`, or buckets() when none does.
  [[nodiscard]] std::size_t bucket_of(std::size_t layer) const noexcept;
  void on_message(std::size_t from, net::Message&& message);

  const SyncContext& ctx_;
  LaneRouter& router_;
  const collective::SegmentCodec* wire_;  // nullptr: floats
  LaneId lane_;
  std::vector<Bucket> buckets_;
};

}  // namespace gradmesh::sync
