#pragma once
// Options of strategy `ako` (Ako SoCC'16 sec. 3).

#include <cstddef>
#include <optional>

namespace gradmesh::sync {

/// sync.ako.* (and net.max_send_rate, which eq. 3 reads as B when set).
struct AkoOptions {
  std::optional<std::size_t> partitions;  ///< p; nullopt = auto (Ako eq. 3)
  std::size_t staleness = 0;              ///< tau, in iterations (Ako sec. 3.3)
  std::optional<double> bandwidth;        ///< B for eq. 3, bytes/s (sync.ako.bandwidth)
  std::optional<double> max_send_rate;    ///< net.max_send_rate, bytes/s: B when set
};

}  // namespace gradmesh::sync
