#include "sync/ako/partition_count.h"

#include "engine/error.h"

namespace gradmesh::sync::ako {

double eq3_bandwidth(const AkoOptions& options, std::optional<double> measured) {
  if (options.max_send_rate) return *options.max_send_rate;
  if (options.bandwidth) return *options.bandwidth;
  if (measured && *measured > 0) return *measured;
  throw ConfigError(
      "sync.ako.partitions = \"auto\" needs the bandwidth B of Ako eq. 3: keep planner.probe = "
      "true (it measures B), or set net.max_send_rate or sync.ako.bandwidth (a rate such as "
      "\"1gbit\"), or give sync.ako.partitions = N");
}

}  // namespace gradmesh::sync::ako
