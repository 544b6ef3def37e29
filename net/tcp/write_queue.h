#pragma once
// One connection's frames not yet started, in the order the ordering contract of net::Transport
// allows: control frames first, data frames by (priority, send order) in a lane per stage, the
// Goodbye last. No libuv: the Connection (net/tcp/connection.h) writes what it hands out.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "net/frame.h"

namespace gradmesh::net::detail {

/// A frame a connection could write next, for the send scheduler (net/tcp/send_queue.cpp).
struct WriteCandidate {
  std::size_t stage = 0;       ///< counter stage id (the StageScheduler's index)
  std::uint32_t priority = 0;  ///< OutgoingFrame::priority: lower is written first
  std::size_t remaining = 0;   ///< bytes of the frame not yet handed to the socket
  bool urgent = false;         ///< a control frame (handshake, Abort, raw, Goodbye): no stage
                               ///< choice, it goes before any data frame
};

/// The frames of one connection that have not started being written.
///
/// Order:
///  - control frames (Hello, HelloAck, Refuse, Abort, raw test bytes) first, in queue order: the
///    handshake precedes all data, an Abort is not held up behind queued data;
///  - then data frames, in one lane per stage, each lane ordered by (priority, sequence): lower
///    priority first, queue order among equal priorities;
///  - the Goodbye last, once nothing else is queued: it follows every data frame queued before it,
///    whatever their priority.
/// Across lanes the caller chooses (by_stage) or the queue keeps one order over all stages by
/// (priority, sequence) (!by_stage).
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
  /// (urgent); else, with `by_stage`, the best frame of every stage in use, without, the best data
  /// frame over all stages; else the Goodbye (urgent).
  template <class Visit>
  void for_each_candidate(bool by_stage, Visit&& visit) const {
    if (!control_.empty()) {
      visit(candidate_of(*control_.front(), true));
    } else if (!active_.empty()) {
      if (by_stage) {
        for (const std::size_t stage : active_) visit(candidate_of(*lanes_[stage].front(), false));
      } else {
        visit(candidate_of(*lanes_[best_stage()].front(), false));
      }
    } else if (!last_.empty()) {
      visit(candidate_of(*last_.front(), true));
    }
  }

  /// Calls `visit(std::size_t stage)` for every stage with a data frame queued.
  template <class Visit>
  void for_each_stage(Visit&& visit) const {
    for (const std::size_t stage : active_) visit(stage);
  }

  /// Removes and returns the frame to start: the first control frame if any; else the best frame
  /// of lane `stage` (of the best lane if `stage` has none); else the Goodbye. Null when empty.
  [[nodiscard]] std::unique_ptr<OutgoingFrame> pop(std::size_t stage) noexcept;

  /// Drops every queued frame.
  void clear() noexcept;

 private:
  using Heap = std::vector<std::unique_ptr<OutgoingFrame>>;  // front = best

  static WriteCandidate candidate_of(const OutgoingFrame& frame, bool urgent) noexcept {
    return {frame.stage(), frame.priority, frame.wire_bytes(), urgent};
  }
  [[nodiscard]] std::size_t best_stage() const noexcept;

  std::uint64_t next_sequence_ = 0;
  std::vector<std::unique_ptr<OutgoingFrame>> control_;  // FIFO (short: front erase is cheap)
  std::vector<Heap> lanes_;                              // index = stage; grown on first use
  std::vector<std::size_t> active_;                      // stages whose lane is not empty
  std::vector<std::unique_ptr<OutgoingFrame>> last_;     // the Goodbye
};

}  // namespace gradmesh::net::detail
