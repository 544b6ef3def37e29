#pragma once
// All-gather of one payload a rank over the transport, and a barrier (an all-gather of nothing):
// the start-up collectives of every strategy (the link probe's phases and barriers, the profile
// exchange, the resume agreement and the join requests at checkpoint boundaries), and the
// exchange a compressor with a variable size (top-k's index/value pairs) will need. Each rank
// sends its payload straight to every peer (n - 1 messages, one hop: these payloads are small;
// a large buffer goes round a RingAllReduce instead).

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/task.h"
#include "net/payload.h"
#include "sync/collective/latch.h"
#include "sync/lane_router.h"

namespace gradmesh::sync::collective {

/// Gathers every rank's payload of a round on every rank (index = rank), in rounds.
///
/// Messages: lane `lane` and kind `kind` (the owner routes the lane and hands this gather's
/// messages to on_message(): several gathers may share a lane by kind), key 0, round = the
/// round, payload = the sender's contribution. Rounds: every rank calls start() for the same
/// rounds, in increasing order; a peer's payload of a later round waits (kept, not copied) for
/// this rank's call. Rejected through the router (counted, logged, dropped): a payload of a round
/// already returned, a second payload of one round from one rank, a payload of more than
/// `max_payload_bytes`, a payload of a new round while `max_pending_rounds` rounds wait already
/// (a misbehaving peer's: memory stays bounded).
///
/// Thread safety: start(), wait(), await() and take() from the owner's threads (one round at a
/// time); on_message() and fail() from the transport's delivery thread. Internally locked.
class AllGather {
 public:
  /// `priority`: net::Message::priority of this rank's sends (a layer's gather: the layer's
  /// index, as RingAllReduce's buckets).
  AllGather(LaneRouter& router, LaneId lane, std::uint16_t kind,
            std::size_t max_payload_bytes = SIZE_MAX, std::size_t max_pending_rounds = 4,
            std::uint32_t priority = 0);
  AllGather(const AllGather&) = delete;
  AllGather& operator=(const AllGather&) = delete;

  /// Sends `payload` (this rank's contribution to `round`, shared with every peer, not copied) to
  /// every peer. Throws ContractError for a round not above the previous start()'s, the PeerError
  /// of fail() or of the first peer that failed on the way.
  void start(std::uint64_t round, net::Payload payload);

  /// Blocks until every rank's payload of `round` is in (start() first) and returns them (index =
  /// rank); the round is then over. Every payload in wins over a failure since (the peer may have
  /// stopped right after sending). Throws fail()'s PeerError; after `timeout_s` seconds (> 0) a
  /// PeerError naming the first missing rank and its address, "<timeout_text(rank)>".
  [[nodiscard]] std::vector<net::Payload> wait(
      std::uint64_t round, double timeout_s,
      const std::function<std::string(std::size_t rank)>& timeout_text);

  /// Without a thread: completes `done` once every payload of `round` is in (start() first), then
  /// take() them; fails it with fail()'s error.
  void await(std::uint64_t round, engine::Completion done);
  /// The payloads of `round` (index = rank) once await() completed; the round is then over.
  [[nodiscard]] std::vector<net::Payload> take(std::uint64_t round);

  /// A message of this gather from `from`.
  void on_message(std::size_t from, net::Message&& message);
  /// Fails the waiting wait() or await(), and every later one, with `error` (first error wins).
  void fail(const PeerError& error);

  /// Messages of this gather rejected so far.
  [[nodiscard]] std::uint64_t rejected() const;

 private:
  struct Round {
    std::vector<std::optional<net::Payload>> payloads;  // by rank
    std::size_t missing = 0;
    CompletionLatch done;
  };
  Round& round_locked(std::uint64_t round);
  [[nodiscard]] std::vector<net::Payload> finish_locked(std::uint64_t round);
  void reject(std::size_t from, const std::string& why);

  LaneRouter& router_;
  LaneId lane_;
  std::uint16_t kind_;
  std::size_t max_payload_;
  std::size_t max_pending_;
  std::uint32_t priority_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::uint64_t, Round> rounds_;  // open rounds; erased when over
  std::optional<std::uint64_t> started_;   // the round of the last start()
  std::optional<std::uint64_t> finished_;  // the last round over
  std::optional<PeerError> failure_;       // the first failure
  std::uint64_t rejected_ = 0;
};

/// Returns once every rank reached the same round (an AllGather of nothing).
/// Thread safety and errors: as AllGather.
class Barrier {
 public:
  Barrier(LaneRouter& router, LaneId lane, std::uint16_t kind) : gather_(router, lane, kind, 0) {}
  /// Tells every peer this rank reached `round` and waits for all of them (see AllGather::wait).
  void arrive_and_wait(std::uint64_t round, double timeout_s,
                       const std::function<std::string(std::size_t rank)>& timeout_text);
  void on_message(std::size_t from, net::Message&& message) {
    gather_.on_message(from, std::move(message));
  }
  void fail(const PeerError& error) { gather_.fail(error); }

 private:
  AllGather gather_;
};

}  // namespace gradmesh::sync::collective
