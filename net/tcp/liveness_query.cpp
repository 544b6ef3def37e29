#include "net/tcp/liveness_query.h"

#include <algorithm>
#include <utility>

namespace gradmesh::net::tcp {

void LivenessQuery::start(std::uint64_t now_ms, std::vector<bool> asked) {
  due_ = static_cast<std::size_t>(std::count(asked.begin(), asked.end(), true));
  asked_ = std::move(asked);
  asked_at_ms_ = std::max<std::uint64_t>(now_ms, 1);
}

void LivenessQuery::reset() noexcept {
  asked_at_ms_ = 0;
  vouched_at_ms_ = 0;
  due_ = 0;
  asked_.clear();
}

LivenessQuery::Answer LivenessQuery::report(std::size_t from, std::uint64_t silent_ms,
                                            std::uint64_t now_ms, std::uint64_t timeout_ms) {
  if (!open()) return Answer::kIgnored;  // answered already, or heard again
  // Heard within the timeout: alive, and its silence here is its link to this node. A peer that
  // stopped at time T cannot be: this node asked after now - T passed the timeout, and the other
  // answered later still.
  if (silent_ms < timeout_ms) {
    vouched_at_ms_ = std::max(vouched_at_ms_, now_ms - std::min(now_ms, silent_ms));
    asked_at_ms_ = 0;
    return Answer::kVouched;
  }
  return count(from);
}

LivenessQuery::Answer LivenessQuery::peer_failed(std::size_t from) {
  if (!open()) return Answer::kIgnored;
  return count(from);
}

LivenessQuery::Answer LivenessQuery::count(std::size_t from) {
  if (from >= asked_.size() || !asked_[from]) return Answer::kIgnored;  // answered already
  asked_[from] = false;
  return --due_ == 0 ? Answer::kSettled : Answer::kPending;
}

}  // namespace gradmesh::net::tcp
