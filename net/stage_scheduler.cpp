#include "net/stage_scheduler.h"

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

void check_stage_weights(std::span<const double> weights, std::size_t stages) {
  if (weights.size() > stages)
    throw ConfigError("transport: " + std::to_string(weights.size()) + " stage weights for " +
                      std::to_string(stages) + " stages; expected at most one weight per stage");
  for (std::size_t s = 0; s < weights.size(); ++s)
    if (!std::isfinite(weights[s]) || weights[s] < 0.0)
      throw ConfigError("transport: stage weight [" + std::to_string(s) +
                        "] = " + std::to_string(weights[s]) +
                        "; expected a finite number >= 0 (0 = the default weight 1)");
}

StageScheduler::StageScheduler(std::size_t stages)
    : weight_(stages, 1.0), virtual_(stages, 0.0), offered_in_(stages, 0) {
  GRADMESH_CHECK_GT(stages, std::size_t{0}, "StageScheduler needs at least one stage");
  newcomers_.reserve(stages);
}

void StageScheduler::set_weights(std::span<const double> weights) noexcept {
  for (std::size_t s = 0; s < weight_.size(); ++s)
    weight_[s] = s < weights.size() && weights[s] > 0.0 ? weights[s] : 1.0;
}

void StageScheduler::begin_choice() noexcept {
  ++epoch_;
  newcomers_.clear();
  have_continuing_ = false;
}

void StageScheduler::offer(std::size_t stage) noexcept {
  std::uint64_t& last = offered_in_[stage];
  if (last == epoch_) return;
  const bool continuing = last + 1 == epoch_;
  last = epoch_;
  if (!continuing) {
    newcomers_.push_back(stage);  // capacity reserved: at most one entry per stage
  } else if (!have_continuing_ || virtual_[stage] < continuing_floor_) {
    continuing_floor_ = virtual_[stage];
    have_continuing_ = true;
  }
}

void StageScheduler::settle() noexcept {
  const double floor = have_continuing_ ? continuing_floor_ : system_;
  for (const std::size_t stage : newcomers_) virtual_[stage] = std::max(virtual_[stage], floor);
  newcomers_.clear();
}

void StageScheduler::charge(std::size_t stage, std::size_t bytes) noexcept {
  system_ = virtual_[stage];
  virtual_[stage] += static_cast<double>(bytes) / weight_[stage];
  if (system_ > kRebaseAbove) {
    // A stage below the system virtual time is idle and would be raised to it when it comes back:
    // clamping it to the new origin changes nothing.
    for (double& v : virtual_) v = std::max(0.0, v - system_);
    system_ = 0.0;
  }
}

}  // namespace gradmesh::net
