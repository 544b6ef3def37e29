#pragma once
// One connection's frames not yet started, in the order the ordering contract of net::Transport
// allows: control frames first, data frames by (priority, send order) in a lane per lane, the
// Goodbye last. No libuv: the Connection (net/tcp/connection.h) writes what it hands out.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "net/frame.h"

namespace gradmesh::net::detail {

/// A frame a connection could write next, for the send scheduler (net/tcp/send_scheduler.h).
struct WriteCandidate {
  std::size_t lane = 0;        ///< counter lane id (the LaneScheduler's index)
  std::uint32_t priority = 0;  ///< OutgoingFrame::priority: lower is written first
  std::size_t remaining = 0;   ///< bytes of the frame not yet handed to the socket
  bool urgent = false;         ///< a control frame (handshake, Abort, raw, Goodbye): no lane
                               ///< choice, it goes before any data frame
};

/// The frames of one connection that have not started being written.
///
/// Order:
///  - control frames (Hello, HelloAck, Refuse, Abort, raw test bytes) first, in queue order: the
///    handshake precedes all data, an Abort is not held up behind queued data;
///  - then data frames, in one lane per lane, each lane ordered by (priority, sequence): lower
///    priority first, queue order among equal priorities;
///  - the Goodbye last, once nothing else is queued: it follows every data frame queued before it,
///    whatever their priority.
/// Across lanes the caller chooses (by_lane) or the queue keeps one order over all lanes by
/// (priority, sequence) (!by_lane).
///
/// Cost: push and pop O(log lane length); candidates O(lanes in use). No allocation per frame
/// once each lane's heap has reached its longest length (its capacity is reused).
/// Thread safety: none (the loop thread's).
class WriteQueue final {
 public:
  WriteQueue() = default;
  WriteQueue(const WriteQueue&) = delete;
  WriteQueue& operator=(const WriteQueue&) = delete;

  /// Queues `frame`, setting its `sequence`. May throw std::bad_alloc while a lane grows (the
  /// frame is then dropped with the exception).
  void push(std::unique_ptr<OutgoingFrame> frame);

  [[nodiscard]] bool empty() const noexcept {
    return control_.empty() && active_.empty() && last_.empty();
  }
  /// Whether a control frame is queued (pop() returns it first).
  [[nodiscard]] bool has_control() const noexcept { return !control_.empty(); }

  /// Calls `visit(const WriteCandidate&)` for what may start next: the first control frame if any
  /// (urgent); else, with `by_lane`, the best frame of every lane in use, without, the best data
  /// frame over all lanes; else the Goodbye (urgent).
  template <class Visit>
  void for_each_candidate(bool by_lane, Visit&& visit) const {
    if (!control_.empty()) {
      visit(candidate_of(*control_.front(), true));
    } else if (!active_.empty()) {
      if (by_lane) {
        for (const std::size_t lane : active_) visit(candidate_of(*lanes_[lane].front(), false));
      } else {
        visit(candidate_of(*lanes_[best_lane()].front(), false));
      }
    } else if (!last_.empty()) {
      visit(candidate_of(*last_.front(), true));
    }
  }

  /// Calls `visit(std::size_t lane)` for every lane with a data frame queued.
  template <class Visit>
  void for_each_lane(Visit&& visit) const {
    for (const std::size_t lane : active_) visit(lane);
  }

  /// Removes and returns the frame to start: the first control frame if any; else the best frame
  /// of lane `lane` (of the best lane if `lane` has none); else the Goodbye. Null when empty.
  [[nodiscard]] std::unique_ptr<OutgoingFrame> pop(std::size_t lane) noexcept;

  /// Drops every queued frame.
  void clear() noexcept;

 private:
  using Heap = std::vector<std::unique_ptr<OutgoingFrame>>;  // front = best

  static WriteCandidate candidate_of(const OutgoingFrame& frame, bool urgent) noexcept {
    return {frame.lane(), frame.priority, frame.wire_bytes(), urgent};
  }
  [[nodiscard]] std::size_t best_lane() const noexcept;

  std::uint64_t next_sequence_ = 0;
  std::vector<std::unique_ptr<OutgoingFrame>> control_;  // FIFO (short: front erase is cheap)
  std::vector<Heap> lanes_;                              // index = lane; grown on first use
  std::vector<std::size_t> active_;                      // lanes whose lane is not empty
  std::vector<std::unique_ptr<OutgoingFrame>> last_;     // the Goodbye
};

}  // namespace gradmesh::net::detail
