#include "topo/cost_model.h"

#include <algorithm>
#include <limits>
#include <string>

#include "topo/input_check.h"

namespace gradmesh::topo {

namespace {

constexpr double kFloatBytes = sizeof(float);

void check_nodes(std::size_t nodes) { detail::require(nodes >= 1, "nodes n", nodes, ">= 1"); }

/// The link of a multi-node cost formula: alpha finite >= 0, B finite > 0.
void check_link(LinkCost link) {
  detail::require(detail::finite_non_negative(link.alpha), "link alpha (seconds)", link.alpha,
                  "a finite number >= 0");
  detail::require(detail::finite_positive(link.bandwidth), "link bandwidth B (bytes/s)",
                  link.bandwidth, "a finite number > 0");
  detail::require(detail::finite_non_negative(link.message_seconds),
                  "link message overhead o (seconds)", link.message_seconds,
                  "a finite number >= 0");
}

void check_cluster(const ClusterCost& cluster) {
  check_nodes(cluster.nodes);
  if (cluster.nodes == 1) return;
  check_link(cluster.link);
  detail::require(detail::finite_non_negative(cluster.frame_overhead_bytes),
                  "frame overhead (bytes)", cluster.frame_overhead_bytes, "a finite number >= 0");
  detail::require(detail::finite_non_negative(cluster.step_seconds_per_float),
                  "optimizer step (seconds/float)", cluster.step_seconds_per_float,
                  "a finite number >= 0");
  detail::require(detail::finite_non_negative(cluster.half_encode_seconds_per_float),
                  "16-bit encode (seconds/float)", cluster.half_encode_seconds_per_float,
                  "a finite number >= 0");
  detail::require(detail::finite_non_negative(cluster.half_decode_seconds_per_float),
                  "16-bit decode (seconds/float)", cluster.half_decode_seconds_per_float,
                  "a finite number >= 0");
}

}  // namespace

double phase_seconds(LinkCost link, double messages, double bytes) noexcept {
  return link.alpha + messages * link.message_seconds + bytes / link.bandwidth;
}

LinkCost ClusterCost::link_for(Traffic traffic) const noexcept {
  switch (traffic) {
    case Traffic::kRing:
      return link;
    case Traffic::kAllToAll:
      return all_to_all_link.value_or(link);
    case Traffic::kStar:
      return star_link.value_or(link);
  }
  return link;
}

double ClusterCost::half_encode_seconds() const noexcept {
  return half_encode_seconds_per_float > 0 ? half_encode_seconds_per_float
                                           : kHalfEncodeSteps * step_seconds_per_float;
}

double ClusterCost::half_decode_seconds() const noexcept {
  return half_decode_seconds_per_float > 0 ? half_decode_seconds_per_float
                                           : kHalfDecodeSteps * step_seconds_per_float;
}

LinkMatrix LinkMatrix::uniform(std::size_t nodes, double alpha, double bandwidth) {
  return LinkMatrix{nodes, std::vector<double>(nodes * nodes, alpha),
                    std::vector<double>(nodes * nodes, bandwidth)};
}

LinkCost slowest_link(const LinkMatrix& links) {
  const std::size_t n = links.nodes;
  check_nodes(n);
  detail::require(links.alpha.size() == n * n, "size of the alpha matrix", links.alpha.size(),
                  "n x n = " + std::to_string(n * n));
  detail::require(links.bandwidth.size() == n * n, "size of the bandwidth matrix",
                  links.bandwidth.size(), "n x n = " + std::to_string(n * n));
  detail::require(links.message_seconds.empty() || links.message_seconds.size() == n,
                  "size of the message overhead vector", links.message_seconds.size(),
                  "n = " + std::to_string(n) + " or 0");
  if (n == 1) return LinkCost{0.0, std::numeric_limits<double>::infinity(), 0.0};
  LinkCost slowest{0.0, std::numeric_limits<double>::infinity(), 0.0};
  for (std::size_t node = 0; node < links.message_seconds.size(); ++node) {
    const double o = links.message_seconds[node];
    detail::require(detail::finite_non_negative(o),
                    "message overhead o[" + std::to_string(node) + "] (seconds)", o,
                    "a finite number >= 0");
    slowest.message_seconds = std::max(slowest.message_seconds, o);
  }
  for (std::size_t from = 0; from < n; ++from) {
    for (std::size_t to = 0; to < n; ++to) {
      if (from == to) continue;
      const std::string pair = "[" + std::to_string(from) + "][" + std::to_string(to) + "]";
      const double alpha = links.alpha[from * n + to];
      const double bandwidth = links.bandwidth[from * n + to];
      detail::require(detail::finite_non_negative(alpha), "alpha" + pair + " (seconds)", alpha,
                      "a finite number >= 0");
      detail::require(detail::finite_positive(bandwidth), "bandwidth B" + pair + " (bytes/s)",
                      bandwidth, "a finite number > 0");
      slowest.alpha = std::max(slowest.alpha, alpha);
      slowest.bandwidth = std::min(slowest.bandwidth, bandwidth);
    }
  }
  return slowest;
}

namespace {

/// Per site of `links` (checked): its node count h_s and the ring hops c_s that leave it.
struct SiteCounts {
  std::vector<double> nodes;
  std::vector<double> ring_exits;
};

SiteCounts site_counts(const LinkMatrix& links) {
  const std::size_t n = links.nodes;
  detail::require(links.site.size() == n, "size of the site vector", links.site.size(),
                  "n = " + std::to_string(n) + " or 0");
  SiteCounts counts;
  counts.nodes.assign(links.site_uplink.size(), 0.0);
  counts.ring_exits.assign(links.site_uplink.size(), 0.0);
  for (std::size_t s = 0; s < links.site_uplink.size(); ++s) {
    detail::require(detail::finite_positive(links.site_uplink[s]),
                    "uplink of site " + std::to_string(s) + " (bytes/s)", links.site_uplink[s],
                    "a finite number > 0");
  }
  for (std::size_t r = 0; r < n; ++r) {
    const std::size_t s = links.site[r];
    detail::require(s < links.site_uplink.size(), "site of rank " + std::to_string(r), s,
                    "< the number of site uplinks, " + std::to_string(links.site_uplink.size()));
    counts.nodes[s] += 1.0;
    if (n > 1 && links.site[(r + 1) % n] != s) counts.ring_exits[s] += 1.0;
  }
  return counts;
}

/// What site s's uplink carries of `traffic` (outbound), in one node's bytes (0: nothing; an empty
/// site, or every node in one).
double uplink_share(const LinkMatrix& links, const SiteCounts& counts, std::size_t s,
                    Traffic traffic) {
  const double n = static_cast<double>(links.nodes), h = counts.nodes[s];
  switch (traffic) {
    case Traffic::kRing:
      return counts.ring_exits[s];
    case Traffic::kAllToAll:
      return h * (n - h) / (n - 1.0);
    case Traffic::kStar:
      return (s == links.site[0] ? n - h : h) / (n - 1.0);
  }
  return 0.0;
}

}  // namespace

LinkCost traffic_link(const LinkMatrix& links, Traffic traffic) {
  LinkCost link = slowest_link(links);
  if (links.site.empty() || links.nodes == 1) return link;
  const SiteCounts counts = site_counts(links);
  for (std::size_t s = 0; s < counts.nodes.size(); ++s) {
    const double share = uplink_share(links, counts, s, traffic);
    if (share > 0) link.bandwidth = std::min(link.bandwidth, links.site_uplink[s] / share);
  }
  return link;
}

double inter_site_bytes(const LinkMatrix& links, Traffic traffic, double bytes_per_node) {
  (void)slowest_link(links);  // checks the matrix
  if (links.site.empty() || links.nodes == 1) return 0.0;
  const SiteCounts counts = site_counts(links);
  double crossing = 0;  // in nodes' bytes
  for (std::size_t s = 0; s < counts.nodes.size(); ++s)
    crossing += uplink_share(links, counts, s, traffic);
  return crossing * bytes_per_node;
}

AllReduceCost ring_allreduce_cost(LinkCost link, std::size_t nodes, double frame_overhead_bytes) {
  check_cluster(ClusterCost{nodes, link, frame_overhead_bytes, 0.0, 0.0});
  if (nodes == 1) return {};
  const double steps = 2.0 * static_cast<double>(nodes - 1);
  // Each step is a phase of one message carrying only its header in the start-up term.
  return AllReduceCost{steps * phase_seconds(link, 1.0, frame_overhead_bytes),
                       steps / (static_cast<double>(nodes) * link.bandwidth)};
}

double ring_allreduce_bytes(double bytes, std::size_t nodes, double frame_overhead_bytes) {
  check_nodes(nodes);
  const double steps = 2.0 * static_cast<double>(nodes - 1);
  return steps * bytes / static_cast<double>(nodes) + steps * frame_overhead_bytes;
}

std::size_t chunks_of(std::size_t floats, std::size_t chunk_floats) {
  detail::require(chunk_floats >= 1, "KV chunk size (floats)", chunk_floats, ">= 1");
  return (floats + chunk_floats - 1) / chunk_floats;
}

SchemeCost ps_cost(const ClusterCost& cluster, std::size_t floats, std::size_t chunk_floats,
                   std::optional<double> payload_bytes) {
  check_cluster(cluster);
  const auto chunks = static_cast<double>(chunks_of(floats, chunk_floats));
  if (cluster.nodes == 1 || floats == 0) return {};
  const double n = static_cast<double>(cluster.nodes);
  const double share = 2.0 * (n - 1.0) / n;  // both phases, mean over nodes
  SchemeCost cost;
  cost.bytes_sent = share * (payload_bytes.value_or(kFloatBytes * static_cast<double>(floats)) +
                             chunks * cluster.frame_overhead_bytes);
  cost.messages = share * chunks;
  // Two phases (push, then broadcast), each half the messages and bytes.
  cost.comm_seconds = 2.0 * phase_seconds(cluster.link_for(Traffic::kAllToAll), cost.messages / 2,
                                          cost.bytes_sent / 2);
  return cost;
}

SchemeCost sfb_cost(const ClusterCost& cluster, std::size_t batch, std::size_t rows,
                    std::size_t cols, FactorWire wire) {
  check_cluster(cluster);
  if (cluster.nodes == 1) return {};
  detail::require(detail::finite_positive(cluster.gemm_flops), "GEMM rate (FLOP/s)",
                  cluster.gemm_flops, "a finite number > 0");
  const double n = static_cast<double>(cluster.nodes);
  const double k = static_cast<double>(batch);
  const double m = static_cast<double>(rows);
  const double c = static_cast<double>(cols);
  SchemeCost cost;
  cost.bytes_sent = (n - 1.0) * (wire.bytes_per_float * k * (m + c) + wire.header_bytes +
                                 cluster.frame_overhead_bytes);
  cost.messages = n - 1.0;
  cost.comm_seconds =
      phase_seconds(cluster.link_for(Traffic::kAllToAll), cost.messages, cost.bytes_sent);
  cost.compute_seconds =
      2.0 * n * k * m * c / cluster.gemm_flops + (m * c + m) * cluster.step_seconds_per_float;
  if (wire.bytes_per_float < kFloatBytes) {
    cost.codec_seconds =
        (cluster.half_encode_seconds() + n * cluster.half_decode_seconds()) * k * (m + c);
    cost.compute_seconds += cost.codec_seconds;
  }
  return cost;
}

SchemeCost allreduce_cost(const ClusterCost& cluster, std::size_t floats) {
  check_cluster(cluster);
  if (cluster.nodes == 1 || floats == 0) return {};
  const double bytes = kFloatBytes * static_cast<double>(floats);
  SchemeCost cost;
  cost.bytes_sent = ring_allreduce_bytes(bytes, cluster.nodes, cluster.frame_overhead_bytes);
  cost.messages = 2.0 * static_cast<double>(cluster.nodes - 1);
  cost.comm_seconds =
      ring_allreduce_cost(cluster.link, cluster.nodes, cluster.frame_overhead_bytes).seconds(bytes);
  cost.compute_seconds = static_cast<double>(floats) * cluster.step_seconds_per_float;
  return cost;
}

}  // namespace gradmesh::topo
