#pragma once
// The outer exchange of strategy local (issue 57, item 3): the mean over the nodes of the
// pseudo-gradients Delta, uncompressed or through the compressor [sync.compression] names, in
// the form its traits allow:
//   - none: a ring all-reduce of the floats (DiLoCo, Douillard et al., arXiv 2311.08105, Alg. 1);
//   - a compressor with a segment format (fp16, bf16): the ring in that format, one rounding a
//     hop and no error feedback, as OpenDiLoCo's fp16 all-reduce (arXiv 2407.07852, sec. 3);
//   - any other registered compressor (int8, sign, qsgd, top-k, random-k, a program's own): each
//     node encodes Delta plus its residual with error feedback, the encodings are all-gathered
//     and every node decodes and averages the n of them, the residual kept across rounds
//     (INTELLECT-1's int8, arXiv 2412.01152; SparseLoCo's top-k with error feedback,
//     arXiv 2603.08163; Karimireddy et al., ICML'19, for error feedback).

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "engine/task.h"
#include "sync/collective/all_gather.h"
#include "sync/collective/ring_allreduce.h"
#include "sync/compress/codec.h"
#include "sync/compress/options.h"
#include "sync/lane_router.h"
#include "topo/cost_model.h"

namespace gradmesh::sync::local {

/// The message kind of the gathered encodings on lane local_outer (the rings' kinds are
/// collective::RingKind's 1 and 2): fragment p's exchange gathers with kind kGatheredKind + p
/// (LocalStage's fragments); every kind below it is a ring's.
inline constexpr std::uint16_t kGatheredKind = 3;

/// What one outer exchange costs a node, as the planner's formulas give it.
struct OuterCost {
  double seconds = 0;  ///< the exchange's communication plus its encodes and decodes, seconds
  double bytes = 0;    ///< bytes one node sends, payload + frame headers (the star: rank 0's)
  topo::Traffic traffic = topo::Traffic::kRing;  ///< the links it loads (topo::traffic_link)
};

/// The cost of one outer exchange of `floats` floats on `cluster` under `compression` (none, or
/// a registered compressor):
///   none: T_ar(4 m) (MG-WFBP eq. 9), ring_allreduce_bytes(4 m);
///   segment format: T_ar(b) with b = the segment format's bytes for m floats, plus a 16-bit
///     encode and decode a float (ClusterCost::half_encode_seconds(), half_decode_seconds());
///   gathered: alpha + (n - 1) o + (n - 1)(b + h) / B, with b the compressor's encoded bytes,
///     plus its encode and n decodes (CompressorCost steps x step_seconds_per_float).
/// One node: 0. Throws ConfigError for a method that is no registered compressor (PowerSGD needs
/// a layer's matrix: it has no outer form), ContractError for a bad cluster.
[[nodiscard]] OuterCost outer_exchange_cost(const topo::ClusterCost& cluster, std::size_t floats,
                                            const CompressionOptions& compression);

/// The cost of one merge of quorum rounds (quorum_rounds.h) of `floats` floats on `cluster`: the
/// leader's link carries the n - 1 Deltas in and the model out to n - 1 peers, one after the
/// other on the critical path: 2 alpha + 2 (n - 1) o + 2 (n - 1) (4 m + h) / B; bytes: the
/// leader's, (n - 1)(4 m + h) (another node sends 4 m + h). One node: 0. Throws ContractError for
/// a bad cluster.
[[nodiscard]] OuterCost quorum_exchange_cost(const topo::ClusterCost& cluster, std::size_t floats);

/// How the outer exchange of `compression` crosses the wire, for plans and logs: "ring of
/// floats", "fp16 ring", "int8 all-gather with error feedback".
[[nodiscard]] std::string outer_exchange_name(const CompressionOptions& compression);

/// One node's side of the outer exchange of a buffer of `floats` floats, in rounds (the outer
/// rounds, every node the same ones in increasing order).
///
/// Memory: the ring keeps two rounds of its segments; the gathered form one encoding a round
/// (allocated at start(): once a round of H iterations) and the residual (m floats).
/// Thread safety: start(), mean() from the stage's tasks (ordered by the graph); await() from a
/// task; on_message() and fail() from the delivery thread.
class OuterExchange final {
 public:
  /// On `router`'s lane `lane` (routed by the owner, which hands this exchange's messages to
  /// on_message()), ring bucket `bucket`, or gathered messages of kind `gathered_kind` (>=
  /// kGatheredKind). `seed`: the job's (random-k's indices); `rank`: this node's. Throws
  /// ConfigError as outer_exchange_cost().
  OuterExchange(LaneRouter& router, LaneId lane, std::uint32_t bucket, std::size_t floats,
                const CompressionOptions& compression, std::uint64_t seed, std::size_t rank,
                std::uint16_t gathered_kind = kGatheredKind);

  /// Begins round `round` with this node's `delta` (floats() floats). The ring reduces it in
  /// place (untouched until mean()); the gathered form encodes it (with the residual) here.
  /// Throws the PeerError of a failed peer.
  void start(std::uint64_t round, std::span<float> delta);
  /// Completes `done` once round `round`'s contributions are all in, or fails it with fail()'s
  /// error.
  void await(std::uint64_t round, engine::Completion done);
  /// The mean over the `nodes` nodes of round `round` into `out` (floats() floats), once await()
  /// completed. The gathered form's encodings were checked on arrival.
  void mean(std::uint64_t round, std::size_t nodes, std::span<float> out);

  /// A message of this exchange (its ring's, or kind kGatheredKind): a gathered encoding that is
  /// not one of this codec's is rejected through the router (counted, logged, dropped) and the
  /// exchange fails with a PeerError naming its sender (fail()): the round cannot complete
  /// without that node's encoding, so the job stops (or rolls back) instead of waiting for good.
  void on_message(std::size_t from, net::Message&& message);
  /// Fails the waiting await() and every later one with `error`.
  void fail(const PeerError& error);
  /// Whether `message` is this exchange's (its ring's bucket or its gathered kind).
  [[nodiscard]] bool owns(const net::Message& message) const noexcept;

  [[nodiscard]] std::size_t floats() const noexcept { return floats_; }
  /// The error-feedback residual kept across rounds (checkpoints), or nullptr (ring forms).
  [[nodiscard]] engine::Checkpointable* residual() noexcept { return codec_ ? &*codec_ : nullptr; }
  /// Sets the residual to zero (a re-split's copy of another node's state); nothing for a ring.
  void clear_residual() noexcept {
    if (codec_) codec_->clear_residual();
  }
  /// The residual's floats (floats() of them; empty for the ring forms).
  [[nodiscard]] std::span<const float> residual_floats() const noexcept {
    return codec_ ? codec_->residual() : std::span<const float>{};
  }

 private:
  LaneRouter& router_;
  LaneId lane_;
  std::uint32_t bucket_;
  std::uint16_t gathered_kind_;
  std::size_t floats_;
  std::optional<collective::RingAllReduce> ring_;
  std::optional<compress::Codec> codec_;           // the gathered form's, with error feedback
  std::unique_ptr<collective::AllGather> gather_;  // the gathered form's
};

}  // namespace gradmesh::sync::local
