#include "sync/ako/partition_agreement.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "engine/error.h"

namespace gradmesh::sync::ako {

PartitionAgreement::PartitionAgreement(std::size_t rank, std::size_t nodes, std::size_t floats,
                                       bool automatic, double bandwidth,
                                       std::vector<double> link_rates)
    : rank_(rank),
      nodes_(nodes),
      floats_(floats),
      automatic_(automatic),
      bandwidth_(bandwidth),
      link_rates_(std::move(link_rates)) {
  GRADMESH_CHECK(
      rank < nodes && floats >= 1 && (link_rates_.empty() || link_rates_.size() == nodes),
      "PartitionAgreement: rank < nodes, floats >= 1, one link rate per rank");
  for (std::size_t plan = 0; plan < kPlans; ++plan) {
    gammas_[plan].assign(nodes_, std::nullopt);
    choices_[plan].model_bytes = static_cast<double>(floats_) * sizeof(float);
    choices_[plan].bandwidth = bandwidth_;
    choices_[plan].nodes = nodes_;
  }
}

std::string PartitionAgreement::record(std::size_t from, std::size_t plan, double gamma,
                                       double model_bytes, double bandwidth) {
  GRADMESH_CHECK(from < nodes_ && plan < kPlans, "PartitionAgreement::record: rank, plan");
  const std::lock_guard lock(mutex_);
  if (gammas_[plan][from]) return "a second gradient-rate profile for plan " + std::to_string(plan);
  if (model_bytes != choices_[plan].model_bytes || bandwidth != bandwidth_) {
    return fmt::format("a profile for m = {} bytes, B = {} bytes/s (this node: {}, {})",
                       model_bytes, bandwidth, choices_[plan].model_bytes, bandwidth_);
  }
  if (!std::isfinite(gamma) || gamma < 0) return fmt::format("a gradient rate of {}", gamma);
  gammas_[plan][from] = gamma;
  return {};
}

std::optional<PartitionChoice> PartitionAgreement::try_agree(std::size_t plan, const Live& live) {
  if (!automatic_ || nodes_ == 1 || plan >= kPlans) return std::nullopt;
  const std::lock_guard lock(mutex_);
  // Plans are agreed in order (a node profiles plan 1 only after agreeing on plan 0).
  if (decided_[plan] || (plan > 0 && !decided_[plan - 1])) return std::nullopt;
  // Every live node's gamma (this node's included); a failed peer's is left out, sent or not.
  double sum = 0;
  std::size_t count = 0;
  for (std::size_t r = 0; r < nodes_; ++r) {
    if (r != rank_ && !live(r)) continue;
    if (!gammas_[plan][r]) return std::nullopt;
    sum += *gammas_[plan][r];
    ++count;
  }
  decided_[plan] = true;
  // The mean: every node computes the same p from the same figures (AkoStage's class comment).
  choices_[plan] = partitions_for(sum / static_cast<double>(count), floats_, count, bandwidth_);
  return choices_[plan];
}

const std::vector<std::size_t>& PartitionAgreement::agree(std::size_t plan, std::size_t partitions,
                                                          double p_exact, const Live& live) {
  GRADMESH_CHECK(plan < kPlans && partitions >= 1, "PartitionAgreement::agree: plan, p >= 1");
  {
    const std::lock_guard lock(mutex_);
    choices_[plan].partitions = partitions;
  }
  plans_[plan] = partitions;
  // p on every live link unless the measured rates differ. A configured p is every link's: the
  // user's number, not the probe's.
  const bool by_rate = automatic_ && !link_rates_.empty();
  std::vector<double> rates(nodes_, 0.0);
  for (std::size_t r = 0; r < nodes_; ++r) {
    if (r == rank_ || !live(r)) continue;
    rates[r] = by_rate ? link_rates_[r] : 1.0;
  }
  const std::size_t most = std::min(floats_, std::max(partitions, max_auto_partitions(floats_)));
  link_plans_[plan] = topo::link_partitions(p_exact, partitions, rates, most);
  agreed_.store(plan + 1, std::memory_order_release);
  return link_plans_[plan];
}

void PartitionAgreement::adopt(std::size_t p1, std::size_t p) {
  const std::lock_guard lock(mutex_);
  decided_.fill(true);
  choices_[0].partitions = p1;
  choices_[1].partitions = p;
}

void PartitionAgreement::set_local_gamma(double gamma) {
  const std::lock_guard lock(mutex_);
  PartitionChoice& c = choices_[0];
  c.gamma = gamma;
  c.eq3 =
      bandwidth_ > 0 ? gamma * c.model_bytes * static_cast<double>(nodes_ - 1) / bandwidth_ : 0.0;
}

PartitionChoice PartitionAgreement::choice(std::size_t plan) const {
  const std::lock_guard lock(mutex_);
  return choices_.at(plan);
}

}  // namespace gradmesh::sync::ako
