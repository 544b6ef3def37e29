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

}  // namespace gradmesh::topo
