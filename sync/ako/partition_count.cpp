#include "sync/ako/partition_count.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"

namespace gradmesh::sync::ako {

std::size_t max_auto_partitions(std::size_t model_floats) noexcept {
  const std::size_t by_memory = kMaxRingBytes / std::max<std::size_t>(1, model_floats * sizeof(float));
  return std::max<std::size_t>(1, std::min({kMaxAutoPartitions, model_floats, by_memory}));
}

double PartitionChoice::predicted_send_rate() const noexcept {
  return gamma * model_bytes * static_cast<double>(nodes - 1) / static_cast<double>(partitions);
}

PartitionChoice partitions_for(double gamma, std::size_t model_floats, std::size_t nodes,
                               double bandwidth) {
  GRADMESH_CHECK(std::isfinite(gamma) && gamma >= 0, "eq. 3: gamma must be finite and >= 0");
  GRADMESH_CHECK(model_floats >= 1, "eq. 3: empty model");
  GRADMESH_CHECK(nodes >= 1, "eq. 3: no nodes");
  GRADMESH_CHECK(std::isfinite(bandwidth) && bandwidth > 0, "eq. 3: bandwidth must be > 0");
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

double eq3_bandwidth(const AkoOptions& options) {
  if (options.max_send_rate) return *options.max_send_rate;
  if (options.bandwidth) return *options.bandwidth;
  throw ConfigError(
      "sync.ako.partitions = \"auto\" needs the bandwidth B of Ako eq. 3: set net.max_send_rate "
      "or sync.ako.bandwidth (a rate such as \"1gbit\"), or give sync.ako.partitions = N");
}

}  // namespace gradmesh::sync::ako
