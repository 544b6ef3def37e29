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
  const double values[kProfileDoubles] = {gamma, agreement_->choice(plan).model_bytes, bandwidth_};
  const auto bytes = std::as_bytes(std::span<const double>(values));
  // Twice per job: may allocate.
  if (sender_) {
    sender_->broadcast(control_lane_, ako::Kind::kProfile, plan, 0, net::Payload::copy_of(bytes));
  }
  record_profile(ctx_.rank, plan, values);
}

void AkoStage::record_profile(std::size_t from, std::size_t plan, std::span<const double> values) {
  const std::string refused = agreement_->record(from, plan, values[0], values[1], values[2]);
  if (!refused.empty()) {
    reject(from, refused);
    return;
  }
  try_agree(plan);
}

void AkoStage::try_agree(std::size_t plan) {
  const std::optional<ako::PartitionChoice> agreed =
      agreement_->try_agree(plan, [this](std::size_t r) { return live(r); });
  if (!agreed) return;
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
  const std::vector<std::size_t>& links =
      agreement_->agree(plan, partitions, p_exact, [this](std::size_t r) { return live(r); });
  const std::vector<double>& rates = agreement_->link_rates();
  if (auto_partitions_ && !rates.empty() && ctx_.nodes > 1) {
    std::string text;
    for (std::size_t r = 0; r < ctx_.nodes; ++r) {
      if (links[r] == 0) continue;
      text += fmt::format("{}rank {}: {} at {}", text.empty() ? "" : ", ", r, links[r],
                          topo::format_rate(rates[r]));
    }
    const bool uniform = std::all_of(links.begin(), links.end(),
                                     [&](std::size_t q) { return q == 0 || q == partitions; });
    spdlog::log(uniform ? spdlog::level::debug : spdlog::level::info,
                "ako: plan {} per link (measured rates{}): {}", plan,
                uniform ? ", equal within the probe's spread" : "; p_i = ceil(p x mean / rate)",
                text);
  }
  clocks_.set_slack(static_cast<std::uint64_t>(partitions) + options_.staleness);
  if (ctx_.nodes > 1 && router_.connected()) post_pump();
}

void AkoStage::record_local_gamma(double gamma) { agreement_->set_local_gamma(gamma); }

}  // namespace gradmesh::sync
