#include "net/tcp/write_queue.h"

#include <algorithm>
#include <tuple>

namespace gradmesh::net::detail {

namespace {

// Heap order: std::push_heap keeps the greatest element in front, so "greater" is "written later".
bool later(const std::unique_ptr<OutgoingFrame>& a,
           const std::unique_ptr<OutgoingFrame>& b) noexcept {
  return std::tie(a->priority, a->sequence) > std::tie(b->priority, b->sequence);
}

}  // namespace

void WriteQueue::push(std::unique_ptr<OutgoingFrame> frame) {
  frame->sequence = next_sequence_++;
  switch (frame->role()) {
    case FrameRole::kData: {
      const std::size_t lane = frame->lane();
      if (lanes_.size() <= lane) lanes_.resize(lane + 1);
      Heap& queue = lanes_[lane];
      if (queue.empty()) {
        if (active_.capacity() < lanes_.size()) active_.reserve(lanes_.size());
        queue.push_back(std::move(frame));  // may throw; active_ has room for the lane after it
        active_.push_back(lane);
      } else {
        queue.push_back(std::move(frame));
        std::push_heap(queue.begin(), queue.end(), later);
      }
      return;
    }
    case FrameRole::kGoodbye:
      last_.push_back(std::move(frame));
      return;
    case FrameRole::kControl:
    case FrameRole::kRefuse:
    case FrameRole::kAbort:
      control_.push_back(std::move(frame));
      return;
  }
}

std::size_t WriteQueue::best_lane() const noexcept {
  std::size_t best = active_.front();
  for (const std::size_t lane : active_) {
    const OutgoingFrame& a = *lanes_[lane].front();
    const OutgoingFrame& b = *lanes_[best].front();
    if (std::tie(a.priority, a.sequence) < std::tie(b.priority, b.sequence)) best = lane;
  }
  return best;
}

std::unique_ptr<OutgoingFrame> WriteQueue::pop(std::size_t lane) noexcept {
  std::unique_ptr<OutgoingFrame> frame;
  if (!control_.empty()) {
    frame = std::move(control_.front());
    control_.erase(control_.begin());
  } else if (!active_.empty()) {
    if (lane >= lanes_.size() || lanes_[lane].empty()) lane = best_lane();
    Heap& queue = lanes_[lane];
    std::pop_heap(queue.begin(), queue.end(), later);
    frame = std::move(queue.back());
    queue.pop_back();
    if (queue.empty()) std::erase(active_, lane);  // keeps the others' order; a few entries
  } else if (!last_.empty()) {
    frame = std::move(last_.front());
    last_.erase(last_.begin());
  }
  return frame;
}

void WriteQueue::clear() noexcept {
  control_.clear();
  for (Heap& lane : lanes_) lane.clear();
  active_.clear();
  last_.clear();
}

}  // namespace gradmesh::net::detail
