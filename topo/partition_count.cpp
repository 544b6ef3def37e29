#include "topo/partition_count.h"

#include <algorithm>
#include <cmath>

#include "topo/input_check.h"

namespace gradmesh::topo {

std::size_t max_auto_partitions(std::size_t model_floats) noexcept {
  const std::size_t by_memory =
      kMaxRingBytes / std::max<std::size_t>(1, model_floats * sizeof(float));
  return std::max<std::size_t>(1, std::min({kMaxAutoPartitions, model_floats, by_memory}));
}

double PartitionChoice::predicted_send_rate() const noexcept {
  return gamma * model_bytes * static_cast<double>(nodes - 1) / static_cast<double>(partitions);
}

PartitionChoice partitions_for(double gamma, std::size_t model_floats, std::size_t nodes,
                               double bandwidth) {
  detail::require(detail::finite_non_negative(gamma), "eq. 3: gamma (gradients/s)", gamma,
                  "a finite number >= 0");
  detail::require(model_floats >= 1, "eq. 3: model size m (floats)", model_floats, ">= 1");
  detail::require(nodes >= 1, "eq. 3: nodes n", nodes, ">= 1");
  detail::require(detail::finite_positive(bandwidth), "eq. 3: bandwidth B (bytes/s)", bandwidth,
                  "a finite number > 0");
  PartitionChoice c;
  c.gamma = gamma;
  c.model_bytes = static_cast<double>(model_floats) * sizeof(float);
  c.bandwidth = bandwidth;
  c.nodes = nodes;
  c.eq3 = gamma * c.model_bytes * static_cast<double>(nodes - 1) / bandwidth;
  const double most = static_cast<double>(max_auto_partitions(model_floats));
  c.partitions = static_cast<std::size_t>(std::clamp(std::ceil(c.eq3), 1.0, most));
  return c;
}

std::vector<std::size_t> link_partitions(double p_exact, std::size_t partitions,
                                         std::span<const double> rates,
                                         std::size_t max_partitions) {
  detail::require(detail::finite_non_negative(p_exact), "per-link p: p_exact", p_exact,
                  "a finite number >= 0");
  detail::require(partitions >= 1, "per-link p: partitions", partitions, ">= 1");
  detail::require(max_partitions >= 1, "per-link p: max_partitions", max_partitions, ">= 1");
  double sum = 0, slowest = 0, fastest = 0;
  std::size_t links = 0;
  for (const double r : rates) {
    detail::require(std::isfinite(r), "per-link p: a link rate (bytes/s)", r, "a finite number");
    if (r <= 0) continue;
    slowest = links == 0 ? r : std::min(slowest, r);
    fastest = std::max(fastest, r);
    sum += r;
    ++links;
  }
  std::vector<std::size_t> out(rates.size(), 0);
  const bool equal = links < 2 || fastest <= slowest * kEqualLinksRatio;
  const double mean = links > 0 ? sum / static_cast<double>(links) : 0.0;
  const double most = static_cast<double>(max_partitions);
  for (std::size_t i = 0; i < rates.size(); ++i) {
    if (rates[i] <= 0) continue;
    // The ceiling of a value the float error of the mean may have pushed just past an integer.
    const double exact = p_exact * mean / rates[i];
    out[i] = equal
                 ? partitions
                 : static_cast<std::size_t>(std::clamp(std::ceil(exact * (1 - 1e-12)), 1.0, most));
  }
  return out;
}

}  // namespace gradmesh::topo
