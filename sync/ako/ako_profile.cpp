// AkoStage: gamma profiles and the agreement on p (Ako SoCC'16 sec. 3.2, eq. 3).
#include "sync/ako/ako_internal.h"

#include "topo/rate.h"

#include <cmath>

namespace gradmesh::sync {

using namespace ako_internal;

double AkoStage::profile_gamma() const {
  const std::uint64_t c = local_clock_.load(std::memory_order_relaxed);
  if (!profile_started_ || c <= profile_start_clock_) return 0.0;
  const double s = std::chrono::duration<double>(last_handoff_ - profile_start_).count();
  return s > 0 ? static_cast<double>(c - profile_start_clock_) / s : 0.0;
}

void AkoStage::end_profile(std::size_t plan, double gamma) {
  profile_started_ = false;
  profiles_sent_ = plan + 1;
  if (profiles_sent_ == plans_needed()) {
    profiled_.store(local_clock_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  if (auto_partitions_) {
    ctx_.executor.post(engine::Arena::kNetwork,
                       [this, plan, gamma] { broadcast_profile(plan, gamma); });
  } else {
    record_local_gamma(gamma);  // explicit p: gamma only for the summary
  }
}

void AkoStage::broadcast_profile(std::size_t plan, double gamma) {
  const double values[kProfileDoubles] = {gamma, choices_[plan].model_bytes, bandwidth_};
  const auto bytes = std::as_bytes(std::span<const double>(values));
  // Twice per job: may allocate.
  broadcast(control_stage_, ako::Kind::kProfile, plan, 0, net::Payload::copy_of(bytes));
  record_profile(ctx_.rank, plan, values);
}

void AkoStage::record_profile(std::size_t from, std::size_t plan, std::span<const double> values) {
  {
    const std::lock_guard lock(profile_mutex_);
    if (gammas_[plan][from]) {
      reject(from, "a second gradient-rate profile for plan " + std::to_string(plan));
      return;
    }
    if (values[1] != choices_[plan].model_bytes || values[2] != bandwidth_) {
      reject(from, fmt::format("a profile for m = {} bytes, B = {} bytes/s (this node: {}, {})",
                               values[1], values[2], choices_[plan].model_bytes, bandwidth_));
      return;
    }
    if (!std::isfinite(values[0]) || values[0] < 0) {
      reject(from, fmt::format("a gradient rate of {}", values[0]));
      return;
    }
    gammas_[plan][from] = values[0];
  }
  try_agree(plan);
}

void AkoStage::try_agree(std::size_t plan) {
  if (!auto_partitions_ || ctx_.nodes == 1) return;
  std::optional<ako::PartitionChoice> agreed;
  {
    const std::lock_guard lock(profile_mutex_);
    // Plans are agreed in order (a node profiles plan 1 only after agreeing on plan 0).
    if (agreed_plan_[plan] || (plan > 0 && !agreed_plan_[plan - 1])) return;
    // Every live node's gamma (this node's included); a failed peer's is left out, sent or not.
    double sum = 0;
    std::size_t live = 0;
    for (std::size_t r = 0; r < ctx_.nodes; ++r) {
      if (r != ctx_.rank && dead(r)) continue;
      if (!gammas_[plan][r]) return;
      sum += *gammas_[plan][r];
      ++live;
    }
    agreed_plan_[plan] = true;
    const double gamma = sum / static_cast<double>(live);  // the mean: see the class comment
    choices_[plan] = ako::partitions_for(gamma, floats_, live, bandwidth_);
    agreed = choices_[plan];
  }
  const ako::PartitionChoice& c = *agreed;
  spdlog::info(
      "ako: {} p = {} by eq. 3: ceil(gamma {:.2f} gradients/s (mean over {} nodes, {}) x "
      "m {} bytes x (n - 1) {} / B {}) = ceil({:.3f}), clamped to [1, {}]; predicted send "
      "rate {} per node; tau = {}",
      plan == 0 ? "warm-up plan:" : "final plan:", c.partitions, c.gamma, c.nodes,
      plan == 0 ? "profiled at p = 1" : "profiled at the warm-up plan's p", c.model_bytes,
      c.nodes - 1, topo::format_rate(c.bandwidth), c.eq3, ako::max_auto_partitions(floats_),
      topo::format_rate(c.predicted_send_rate()), options_.staleness);
  if (c.predicted_send_rate() > c.bandwidth * 1.0000001) {
    spdlog::warn(
        "ako: p is capped at {} (the accumulation queue holds p copies of the model, at "
        "most {} MB), so the predicted send rate {} exceeds B = {}: the network will be "
        "the bottleneck and rounds will carry several gradients",
        c.partitions, ako::kMaxRingBytes >> 20, topo::format_rate(c.predicted_send_rate()),
        topo::format_rate(c.bandwidth));
  }
  agree(plan, c.partitions, c.eq3);
  // The next plan's gammas may all be in already (a fast peer's came before this agreement).
  if (plan + 1 < kPlans) try_agree(plan + 1);
}

void AkoStage::agree(std::size_t plan, std::size_t partitions, double p_exact) {
  plans_[plan] = partitions;
  // Each live link's count (topo::link_partitions): p on every link unless the measured rates
  // differ. An explicit p is every link's: the user's number, not the probe's.
  const bool by_rate = auto_partitions_ && !link_rates_.empty();
  std::vector<double> rates(ctx_.nodes, 0.0);
  for (std::size_t r = 0; r < ctx_.nodes; ++r) {
    if (r == ctx_.rank || dead(r)) continue;
    rates[r] = by_rate ? link_rates_[r] : 1.0;
  }
  const std::size_t most =
      std::min(floats_, std::max(partitions, ako::max_auto_partitions(floats_)));
  link_plans_[plan] = topo::link_partitions(p_exact, partitions, rates, most);
  if (by_rate && ctx_.nodes > 1) {
    std::string text;
    for (std::size_t r = 0; r < ctx_.nodes; ++r) {
      if (link_plans_[plan][r] == 0) continue;
      text += fmt::format("{}rank {}: {} at {}", text.empty() ? "" : ", ", r, link_plans_[plan][r],
                          topo::format_rate(link_rates_[r]));
    }
    const bool uniform = std::all_of(link_plans_[plan].begin(), link_plans_[plan].end(),
                                     [&](std::size_t q) { return q == 0 || q == partitions; });
    spdlog::log(uniform ? spdlog::level::debug : spdlog::level::info,
                "ako: plan {} per link (measured rates{}): {}", plan,
                uniform ? ", equal within the probe's spread" : "; p_i = ceil(p x mean / rate)",
                text);
  }
  agreed_.store(plan + 1, std::memory_order_release);
  clocks_.set_slack(static_cast<std::uint64_t>(partitions) + options_.staleness);
  if (ctx_.nodes > 1 && channel_.connected()) post_pump();
}

void AkoStage::record_local_gamma(double gamma) {
  const std::lock_guard lock(profile_mutex_);
  ako::PartitionChoice& c = choices_[0];
  c.gamma = gamma;
  c.eq3 = bandwidth_ > 0 ? gamma * c.model_bytes * static_cast<double>(ctx_.nodes - 1) / bandwidth_
                         : 0.0;
}

}  // namespace gradmesh::sync
