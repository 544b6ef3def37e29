#include "sync/compress/sparse_model.h"

#include <optional>
#include <string>

#include "engine/error.h"
#include "topo/planner.h"

namespace gradmesh::sync {

std::string_view gathered_lane(const compress::CompressorEntry& entry) noexcept {
  return entry.name;  // the registry's entries never move
}

topo::SchemeCost gathered_cost(const topo::ClusterCost& cluster, std::size_t floats,
                               const compress::CompressorEntry& entry,
                               const compress::CompressorParams& params,
                               const std::optional<topo::CodecSeconds>& measured) {
  (void)topo::ring_allreduce_bytes(0, cluster.nodes);  // checks the node count
  if (cluster.nodes == 1 || floats == 0) return {};
  const auto bytes = static_cast<double>(entry.encoded_bytes(floats, params));
  const double h = cluster.frame_overhead_bytes;
  const bool ring = entry.traits.shared_indices;
  topo::SchemeCost cost;
  if (ring) {
    cost.bytes_sent = topo::ring_allreduce_bytes(bytes, cluster.nodes, h);
    cost.messages = 2.0 * static_cast<double>(cluster.nodes - 1);
    cost.comm_seconds = topo::ring_allreduce_cost(cluster.link, cluster.nodes, h).seconds(bytes);
  } else {
    const double peers = static_cast<double>(cluster.nodes - 1);
    cost.bytes_sent = peers * (bytes + h);
    cost.messages = peers;
    cost.comm_seconds =
        topo::phase_seconds(cluster.link_for(topo::Traffic::kAllToAll), peers, cost.bytes_sent);
  }
  // The encode before the communication; the decodes (n gathered, or the k sums once) and the
  // scheme's passes after it, then the step.
  const double decodes = ring ? 1.0 : static_cast<double>(cluster.nodes);
  const double step = static_cast<double>(floats) * cluster.step_seconds_per_float;
  cost.encode_seconds = measured ? measured->encode : entry.cost.encode_steps * step;
  const double decode =
      (measured ? decodes * measured->decode : decodes * entry.cost.decode_steps * step) +
      kSparseDecodeSteps * step;
  cost.codec_seconds = cost.encode_seconds + decode;
  cost.compute_seconds = decode + step;
  return cost;
}

topo::SchemeModel sparse_scheme_model(std::string_view method,
                                      const compress::CompressorParams& params) {
  const compress::CompressorEntry& entry = compress::compressor_entry(method);
  topo::SchemeModel m;
  m.id = entry.name;
  m.compressed = true;
  m.cost = [&entry, params](const topo::SchemeCostInput& in, const topo::LayerProfile& layer) {
    return gathered_cost(in.cluster, layer.parameters, entry, params, layer.codec);
  };
  m.lanes = {{std::string(gathered_lane(entry)), 1.0}};
  m.traffic = entry.traits.shared_indices ? topo::Traffic::kRing : topo::Traffic::kAllToAll;
  return m;
}

}  // namespace gradmesh::sync
