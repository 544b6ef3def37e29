#pragma once
// A restarted node rejoining a running Ako job (Ako SoCC'16 sec. 4.3): the join requests a donor
// answers at its next iteration boundary, and the state it sends (kJoinState).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "net/message.h"
#include "net/payload.h"

namespace gradmesh::sync::ako {

/// What a joiner takes from its donor: the donor's replica (m floats), its clock, its plans p1
/// and p, and B, the rate of the job's slowest link as the donor knows it (bytes/s, 0: unknown),
/// which stands in for the start-up probe the joiner skipped.
struct JoinState {
  std::uint64_t clock = 0;
  std::size_t p1 = 1;
  std::size_t partitions = 1;  ///< p
  double bandwidth = 0;
  /// The replica's bytes (m floats) in the message's payload; copy them out with memcpy (a
  /// received payload need not be aligned for floats).
  std::span<const std::byte> replica;
};

/// Both sides of a rejoin, each with its own lock.
///
/// Donor: request() queues a peer that asked for this node's state (any thread); at an
/// iteration boundary the compute side, seeing requested(), takes the queue (take_requests()) and
/// sends each the state (encode()).
///
/// Joiner: offer() keeps the first well-formed state from its donor (the network side); await()
/// blocks the joining thread until it is in, the donor is given up (`give_up`, checked whenever
/// wake() is called) or the time is out.
///
/// The wire form of a state (kJoinState): key = p << 32 | p1, round = clock, payload = m floats
/// then B as a double.
///
/// Thread safety: any thread.
class JoinExchange {
 public:
  /// For a model of `floats` floats (m >= 1).
  explicit JoinExchange(std::size_t floats);

  // ---- donor ----
  /// Queues `peer`'s request for this node's state.
  void request(std::size_t peer);
  /// Whether a request waits (acquire): the compute side's cheap check at each boundary.
  [[nodiscard]] bool requested() const noexcept {
    return requested_.load(std::memory_order_acquire);
  }
  /// The waiting requests, in arrival order; the queue is then empty.
  [[nodiscard]] std::vector<std::size_t> take_requests();
  /// The payload of a state: `replica` (m floats) then `bandwidth`. Allocates (once per rejoin).
  [[nodiscard]] net::Payload encode(std::span<const float> replica, double bandwidth) const;
  /// The message key of a state with plans `p1` and `p` (each < 2^32).
  [[nodiscard]] static std::uint64_t key(std::size_t p1, std::size_t p) noexcept;

  // ---- joiner ----
  /// Keeps `message` as the state to rejoin with. Returns "" when kept, else why it was refused
  /// (a payload of the wrong size, p1 or p outside [1, m], B not finite or negative; a second
  /// state): the caller rejects it and nothing changes.
  [[nodiscard]] std::string offer(net::Message&& message);
  /// Blocks until a state was offered and returns it, or returns nullopt when `give_up()` holds
  /// (checked at each wake()) or `timeout` passed. The returned message owns the replica that
  /// decode() views.
  [[nodiscard]] std::optional<net::Message> await(std::chrono::duration<double> timeout,
                                                  const std::function<bool()>& give_up);
  /// Wakes await() to check `give_up` again (a peer failed).
  void wake();
  /// The state in a message offer() kept. Never throws for such a message.
  [[nodiscard]] JoinState decode(const net::Message& message) const;

 private:
  const std::size_t floats_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::size_t> requests_;   // under mutex_
  std::atomic<bool> requested_{false};  // requests_ is not empty
  std::optional<net::Message> state_;   // under mutex_
  bool taken_ = false;                  // await() returned the state: no other is kept
};

}  // namespace gradmesh::sync::ako
