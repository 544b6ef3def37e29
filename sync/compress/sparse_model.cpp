#include "sync/compress/sparse_model.h"

#include <optional>
#include <string>

#include "engine/error.h"
#include "topo/planner.h"

namespace gradmesh::sync {

namespace {

/// The CPU seconds of one layer's encode (encode_seconds, before the communication) and
/// `decodes` decodes, and with the step after the communication (compute_seconds), into `cost`;
/// codec_seconds their sum: measured (`measured`), else `encode_steps` and kSparseDecodeSteps
/// optimizer steps a float.
void add_sparse_compute(topo::SchemeCost& cost, const topo::ClusterCost& cluster,
                        std::size_t floats, double encode_steps, double decodes,
                        const std::optional<topo::CodecSeconds>& measured) {
  const double step = static_cast<double>(floats) * cluster.step_seconds_per_float;
  cost.encode_seconds = measured ? measured->encode : encode_steps * step;
  const double decode =
      measured ? decodes * measured->decode + kSparseDecodeSteps * step : kSparseDecodeSteps * step;
  cost.codec_seconds = cost.encode_seconds + decode;
  cost.compute_seconds = decode + step;
}

}  // namespace

topo::SchemeCost topk_cost(const topo::ClusterCost& cluster, std::size_t floats, double ratio,
                           const std::optional<topo::CodecSeconds>& measured) {
  (void)topo::ring_allreduce_bytes(0, cluster.nodes);  // checks the node count
  if (cluster.nodes == 1 || floats == 0) return {};
  const double peers = static_cast<double>(cluster.nodes - 1);
  const double k = static_cast<double>(compress::kept_entries(floats, ratio));
  topo::SchemeCost cost;
  cost.bytes_sent = peers * (8.0 * k + cluster.frame_overhead_bytes);
  cost.messages = peers;
  cost.comm_seconds = cluster.link.alpha + peers * cluster.link.message_seconds +
                      cost.bytes_sent / cluster.link.bandwidth;
  add_sparse_compute(cost, cluster, floats, kTopKEncodeSteps, static_cast<double>(cluster.nodes),
                     measured);
  return cost;
}

topo::SchemeCost randomk_cost(const topo::ClusterCost& cluster, std::size_t floats, double ratio,
                              const std::optional<topo::CodecSeconds>& measured) {
  (void)topo::ring_allreduce_bytes(0, cluster.nodes);
  if (cluster.nodes == 1 || floats == 0) return {};
  const double bytes = 4.0 * static_cast<double>(compress::kept_entries(floats, ratio));
  const double h = cluster.frame_overhead_bytes;
  topo::SchemeCost cost;
  cost.bytes_sent = topo::ring_allreduce_bytes(bytes, cluster.nodes, h);
  cost.messages = 2.0 * static_cast<double>(cluster.nodes - 1);
  cost.comm_seconds = topo::ring_allreduce_cost(cluster.link, cluster.nodes, h).seconds(bytes);
  add_sparse_compute(cost, cluster, floats, kRandomKEncodeSteps, 1.0, measured);
  return cost;
}

topo::SchemeModel sparse_scheme_model(compress::CodecKind kind, double ratio) {
  GRADMESH_CHECK(
      kind == compress::CodecKind::kTopK || kind == compress::CodecKind::kRandomK,
      "sparse_scheme_model: topk or randomk, not " + std::string(compress::codec_name(kind)));
  const bool top = kind == compress::CodecKind::kTopK;
  topo::SchemeModel m;
  m.id = std::string(top ? kTopKScheme : kRandomKScheme);
  m.compressed = true;
  m.cost = [top, ratio](const topo::SchemeCostInput& in, const topo::LayerProfile& layer) {
    return top ? topk_cost(in.cluster, layer.parameters, ratio, layer.codec)
               : randomk_cost(in.cluster, layer.parameters, ratio, layer.codec);
  };
  m.lanes = {{std::string(top ? kTopKLane : kRandomKLane), 1.0}};
  return m;
}

}  // namespace gradmesh::sync
