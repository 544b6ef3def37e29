#include "net/lane_scheduler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/error.h"

namespace gradmesh::net {

namespace {
// Virtual times are shifted down once the system virtual time passes this (bytes / weight), so
// doubles keep byte resolution however long the node runs.
constexpr double kRebaseAbove = 1099511627776.0;  // 2^40
}  // namespace

void check_lane_weights(std::span<const double> weights, std::size_t lanes) {
  if (weights.size() > lanes)
    throw ConfigError("transport: " + std::to_string(weights.size()) + " lane weights for " +
                      std::to_string(lanes) + " lanes; expected at most one weight per lane");
  for (std::size_t s = 0; s < weights.size(); ++s)
    if (!std::isfinite(weights[s]) || weights[s] < 0.0)
      throw ConfigError("transport: lane weight [" + std::to_string(s) +
                        "] = " + std::to_string(weights[s]) +
                        "; expected a finite number >= 0 (0 = the default weight 1)");
}

LaneScheduler::LaneScheduler(std::size_t lanes)
    : weight_(lanes, 1.0), virtual_(lanes, 0.0), offered_in_(lanes, 0) {
  GRADMESH_CHECK_GT(lanes, std::size_t{0}, "LaneScheduler needs at least one lane");
  newcomers_.reserve(lanes);
}

void LaneScheduler::set_weights(std::span<const double> weights) noexcept {
  for (std::size_t s = 0; s < weight_.size(); ++s)
    weight_[s] = s < weights.size() && weights[s] > 0.0 ? weights[s] : 1.0;
}

void LaneScheduler::begin_choice() noexcept {
  ++epoch_;
  newcomers_.clear();
  have_continuing_ = false;
}

void LaneScheduler::offer(std::size_t lane) noexcept {
  std::uint64_t& last = offered_in_[lane];
  if (last == epoch_) return;
  const bool continuing = last + 1 == epoch_;
  last = epoch_;
  if (!continuing) {
    newcomers_.push_back(lane);  // capacity reserved: at most one entry per lane
  } else if (!have_continuing_ || virtual_[lane] < continuing_floor_) {
    continuing_floor_ = virtual_[lane];
    have_continuing_ = true;
  }
}

void LaneScheduler::settle() noexcept {
  const double floor = have_continuing_ ? continuing_floor_ : system_;
  for (const std::size_t lane : newcomers_) virtual_[lane] = std::max(virtual_[lane], floor);
  newcomers_.clear();
}

void LaneScheduler::charge(std::size_t lane, std::size_t bytes) noexcept {
  system_ = virtual_[lane];
  virtual_[lane] += static_cast<double>(bytes) / weight_[lane];
  if (system_ > kRebaseAbove) {
    // A lane below the system virtual time is idle and would be raised to it when it comes back:
    // clamping it to the new origin changes nothing.
    for (double& v : virtual_) v = std::max(0.0, v - system_);
    system_ = 0.0;
  }
}

}  // namespace gradmesh::net
