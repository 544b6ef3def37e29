#include "sync/ako/send_rate_meter.h"

#include <algorithm>

#include "engine/error.h"

namespace gradmesh::sync::ako {

SendRateMeter::SendRateMeter(std::size_t nodes) : link_payload_(nodes, 0.0) {}

void SendRateMeter::round(Clock::time_point now, std::uint64_t clock, double wire_bytes,
                          const std::vector<double>& link_payload) {
  GRADMESH_CHECK(link_payload.size() == link_payload_.size(),
                 "SendRateMeter::round: one payload figure per rank");
  const std::lock_guard lock(mutex_);
  for (std::size_t r = 0; r < link_payload.size(); ++r) link_payload_[r] += link_payload[r];
  if (rounds_++ == 0) {
    first_ = now;
    first_clock_ = clock;
  } else {
    bytes_ += wire_bytes;
  }
  last_ = now;
  last_clock_ = clock;
}

void SendRateMeter::pause(bool paused, Clock::time_point now) {
  const std::lock_guard lock(mutex_);
  if (paused) {
    pauses_.emplace_back(now, Clock::time_point::max());  // once per epoch: may allocate
  } else if (!pauses_.empty()) {
    pauses_.back().second = now;
  }
}

SendRateMeter::Figures SendRateMeter::figures() const {
  const std::lock_guard lock(mutex_);
  Figures f;
  if (rounds_ >= 2) {
    f.seconds = std::chrono::duration<double>(last_ - first_).count();
    for (const auto& [begin, end] : pauses_) {  // less the pauses within the window
      const auto from = std::max(begin, first_);
      const auto to = std::min(end, last_);
      if (to > from) f.seconds -= std::chrono::duration<double>(to - from).count();
    }
  }
  if (f.seconds > 0) {
    f.send_rate = bytes_ / f.seconds;
    f.gamma = static_cast<double>(last_clock_ - first_clock_) / f.seconds;
  }
  f.link_round_bytes.assign(link_payload_.size(), 0.0);
  if (rounds_ > 0) {
    for (std::size_t r = 0; r < link_payload_.size(); ++r) {
      f.link_round_bytes[r] = link_payload_[r] / static_cast<double>(rounds_);
    }
  }
  return f;
}

}  // namespace gradmesh::sync::ako
