#pragma once
// A ring all-reduce of one buffer (MG-WFBP sec. II-D, Table II "ring": 2 (n - 1) steps, each
// sending 1/n of the bucket to the next rank): reduce-scatter, then all-gather, driven by arrivals.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "engine/task.h"
#include "net/payload.h"
#include "sync/collective/latch.h"
#include "sync/collective/segment_codec.h"
#include "sync/lane_router.h"

namespace gradmesh::sync::collective {

/// Message::kind values of a ring all-reduce, on whichever lane its owner routes (`allreduce`,
/// `ako_partition` for Ako's final average). key = bucket << 32 | step, round = the owner's round
/// (an iteration), payload = one segment of the bucket (floats).
enum class RingKind : std::uint16_t {
  kReduceScatter = 1,  ///< a partial sum, to be added in (steps 0 .. n - 2)
  kAllGather = 2,      ///< a fully reduced segment, to be stored and passed on (steps 0 .. n - 2)
};

/// Sums a buffer ("bucket") of floats over the n ranks of a ring (rank r sends to r + 1 and
/// receives from r - 1), leaving every rank the same bits. Any buffer: a merged group of layers'
/// gradients (AllReduceScheme), a whole replica (Ako's final average). With one rank the sum is the
/// input.
///
/// The bucket is split into n segments (sizes differ by at most one float; empty ones are sent
/// too). Reduce-scatter step s: rank r sends segment (r - s) mod n and adds the arriving segment
/// (r - s - 1) mod n into its input, in place; after n - 1 steps segment (r + 1) mod n holds the
/// full sum. All-gather step s: rank r sends segment (r + 1 - s) mod n of its result and stores
/// the arriving segment (r - s) mod n. Every send after the first is triggered by an arrival, on
/// the transport's delivery thread: no thread waits inside the ring. Sum order: segment j is
/// summed starting at rank j and going round the ring, the same order on every rank, so every
/// replica gets the same bits.
///
/// Buffers, without copies on the way: start() sends views of `input` (the model's gradients,
/// reduced in place); the results go to one of two result buffers by round parity, and
/// all-gather sends views of them. A segment of `input` is never written after it was sent, and
/// a round's result buffer is reused two rounds later, when every peer has provably consumed it
/// (it took part in the round between). The caller must not rewrite `input` before the round
/// completes (the next backward starts after it, BSP).
///
/// Rounds: a peer may start round t + 1 while this rank finishes round t; its messages are kept
/// (not copied) until this rank's start(t + 1). Messages of any other round, a wrong size, a
/// duplicate or a step out of range are rejected through the router.
///
/// Encoded wire (`wire`, a SegmentCodec: compress::half_segment_codec's fp16 or bf16, issue 28):
/// every segment crosses the wire as wire->encoded_bytes(s) bytes instead of 4 s. Reduce-scatter
/// adds each arriving segment, decoded, into the input in fp32 and encodes the partial sum it
/// passes on; the segment's owner encodes the full sum once, stores its own decoding of it as the
/// result and sends those bytes; all-gather forwards the bytes it received unchanged (no
/// re-encoding, no copy) and stores their decoding. So every rank holds the same bits, and the
/// sum's error is one rounding per hop (n - 1 for the partial sums, one for the result): for
/// fp16, at most 2^-11 relative to the value rounded, 2^-8 for bf16. No error feedback: nothing
/// is carried to the next round. The encoded segments live in two buffers by round parity,
/// reused two rounds later as the results are.
///
/// Thread safety: start() and result() from the bucket's tasks (ordered by the graph); on_message()
/// and fail_all() from the delivery thread; await() from a task. Internally locked.
class RingAllReduce {
 public:
  /// Bucket `bucket` of `floats` floats on `router` (n = router.nodes() ranks), sending on lane
  /// `lane` (routed by the owner, which hands this bucket's messages to on_message()) with send
  /// priority `priority` (net::Message::priority: the bucket's first layer, so that the next
  /// forward pass's first layers go first). `wire`: the segments' encoding, or nullptr for the
  /// floats themselves; it must outlive the ring.
  RingAllReduce(LaneRouter& router, LaneId lane, std::uint32_t bucket, std::size_t floats,
                std::uint32_t priority = 0, const SegmentCodec* wire = nullptr);

  /// Begins round `round` with this rank's `input` (floats() floats; reduced in place, so it must
  /// stay untouched until the round completes). Sends reduce-scatter step 0 and processes
  /// arrivals that came early. Throws the PeerError of a failed neighbour.
  void start(std::uint64_t round, std::span<float> input);

  /// Completes `done` when round `round`'s sum is complete, or fails it with fail_all()'s error.
  void await(std::uint64_t round, engine::Completion done);

  /// The sum over all ranks of round `round` (floats() floats), valid once await() completed and
  /// until round + 2 starts.
  [[nodiscard]] std::span<const float> result(std::uint64_t round) const;

  /// A message of this bucket from `from` (the delivery thread).
  void on_message(std::size_t from, net::Message&& message);

  /// Fails the waiting completion and every later await() with `error`.
  void fail_all(std::exception_ptr error);

  [[nodiscard]] std::size_t floats() const noexcept { return floats_; }
  /// Floats of segment `j` and where it starts.
  [[nodiscard]] std::size_t segment_begin(std::size_t j) const noexcept;
  [[nodiscard]] std::size_t segment_size(std::size_t j) const noexcept;
  /// Bytes of segment `j` on the wire: 4 per float, or the wire's encoded_bytes.
  [[nodiscard]] std::size_t wire_bytes(std::size_t j) const noexcept;

 private:
  struct Round {
    std::uint64_t round = 0;
    bool started = false;
    std::span<float> input;
    std::vector<net::Payload> early;  // reduce-scatter arrivals before start(), by step
    std::vector<char> arrived_early;  // by step
    std::vector<char> have_step;      // reduce-scatter steps applied, by step
    std::vector<char> have_gather;    // all-gather steps stored, by step
    std::size_t segments_done = 0;    // segments of the result complete
  };

  // Under mutex_; sends happen with it held (the router never calls back synchronously).
  Settlement reduce_step(Round& r, std::size_t step, const net::Payload& arrived);
  Settlement gather_step(Round& r, std::size_t step, net::Payload arrived);
  /// One more segment of the result is final; releases the round's latch when it was the last.
  Settlement finish_segment(Round& r);
  void send(std::uint64_t round, RingKind kind, std::size_t step, net::Payload payload);
  /// `values` as the wire carries them: a view of them (floats), or encoded into slot `slot` of
  /// the round's buffer (an encoded wire); with `decoded`, also writes the encoding's decoding
  /// there.
  net::Payload wire_payload(std::uint64_t round, std::size_t slot, std::span<const float> values,
                            std::span<float> decoded = {});
  Round* round_for(std::uint64_t round);
  void reset(Round& r, std::uint64_t round) const;
  [[nodiscard]] std::size_t mod(std::int64_t value) const noexcept;
  std::vector<float>& result_buffer(std::uint64_t round) { return results_[round % 2]; }
  void reject(std::size_t from, const std::string& why);

  LaneRouter& router_;
  LaneId lane_;
  std::uint32_t bucket_;
  std::uint32_t priority_;
  std::size_t floats_, nodes_, rank_, left_, right_;
  std::mutex mutex_;
  std::uint64_t current_ = 0;          // the oldest round not yet complete
  Round rounds_[2];                    // by round parity
  CompletionLatch done_[2];            // by round parity; holds the error of fail_all()
  std::vector<float> results_[2];      // by round parity
  const SegmentCodec* wire_;           // null: the floats themselves
  std::size_t slot_bytes_ = 0;         // one encoded segment's room (an encoded wire)
  std::vector<std::byte> encoded_[2];  // by round parity: n slots (an encoded wire; else empty)
};

}  // namespace gradmesh::sync::collective
