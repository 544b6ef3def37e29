#pragma once
// The end of an Ako job among its nodes (Ako SoCC'16 sec. 4.3 for the failed peers): the
// end-of-job markers and the survivors' replicas, for AkoStage::finish().

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "net/payload.h"

namespace gradmesh::sync::ako {

/// What a node's finish() waits on. Each node tells every peer that it has sent all it will
/// (kDone: done()) and waits, bounded, until every live peer has (await_done()). After a peer
/// failed (sync.ako.final = average), the survivors send each other their replicas (kReplica:
/// replica()) and each replaces its own by the mean of those that arrive by a deadline, summed in
/// rank order (average_survivors()): survivors that got the same replicas end with the same bits.
/// notify() wakes every waiter to check again (a peer failed; the sender sent a round, for
/// finish()'s flush: wait()).
///
/// Memory: one m-float payload per peer at most (the survivors' replicas, shared, not copied).
/// Thread safety: any thread; an internal mutex.
class FinalExchange {
 public:
  using Clock = std::chrono::steady_clock;
  /// Whether rank `r` is live (a failed peer is not waited for).
  using Live = std::function<bool(std::size_t r)>;

  /// This node is `rank` of `nodes`; the model has `floats` floats (m).
  FinalExchange(std::size_t rank, std::size_t nodes, std::size_t floats);

  /// Peer `from` has sent all it will. Returns "" or why the marker was refused (a second one).
  [[nodiscard]] std::string done(std::size_t from);
  /// Peer `from`'s replica for the survivors' mean. Returns "" when kept, else why it was refused
  /// (not m floats; a second one).
  [[nodiscard]] std::string replica(std::size_t from, net::Payload&& payload);
  /// Forgets `peer`'s marker and replica: it restarted and rejoined.
  void reset(std::size_t peer);

  /// Live peers whose marker has not arrived.
  [[nodiscard]] std::size_t pending(const Live& live);
  /// Waits until every live peer's marker has arrived or `deadline`; returns whether they all did.
  [[nodiscard]] bool await_done(Clock::time_point deadline, const Live& live);
  /// Waits until every live peer's replica has arrived or `deadline`, then sets `replica` (this
  /// node's, m floats) to the mean of it and every replica that arrived, summed in rank order.
  /// Returns how many replicas the mean took (1: none arrived; `replica` is then unchanged).
  std::size_t average_survivors(std::span<float> replica, Clock::time_point deadline,
                                const Live& live);

  /// Wakes every waiter to check again.
  void notify();
  /// Waits for notify() at most `timeout` (finish()'s flush polls its own condition around it).
  void wait(std::chrono::milliseconds timeout);

 private:
  const std::size_t rank_;
  const std::size_t nodes_;
  const std::size_t floats_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<char> done_;                             // per rank: its marker arrived
  std::vector<std::optional<net::Payload>> replicas_;  // per rank: its replica arrived
  [[nodiscard]] std::size_t pending_locked(const Live& live) const;
};

}  // namespace gradmesh::sync::ako
