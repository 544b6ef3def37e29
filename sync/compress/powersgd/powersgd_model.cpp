#include "sync/compress/powersgd/powersgd_model.h"

#include <algorithm>
#include <string>

#include "engine/error.h"
#include "topo/planner.h"

namespace gradmesh::sync {

topo::SchemeCost powersgd_cost(const topo::ClusterCost& cluster, std::size_t rows, std::size_t cols,
                               std::size_t bias, std::size_t rank,
                               const std::optional<topo::CodecSeconds>& measured) {
  (void)topo::ring_allreduce_bytes(0, cluster.nodes);  // checks the node count
  if (cluster.nodes == 1 || rows == 0 || cols == 0) return {};
  GRADMESH_CHECK(cluster.gemm_flops > 0, "powersgd_cost: a GEMM rate > 0 (FLOP/s)");
  const double r = static_cast<double>(std::min({rank, rows, cols}));
  const double m = static_cast<double>(rows), c = static_cast<double>(cols);
  const double p_bytes = 4.0 * (m * r + static_cast<double>(bias));
  const double q_bytes = 4.0 * c * r;
  const double h = cluster.frame_overhead_bytes;
  const topo::AllReduceCost ring = topo::ring_allreduce_cost(cluster.link, cluster.nodes, h);
  topo::SchemeCost cost;
  cost.bytes_sent = topo::ring_allreduce_bytes(p_bytes, cluster.nodes, h) +
                    topo::ring_allreduce_bytes(q_bytes, cluster.nodes, h);
  cost.messages = 4.0 * static_cast<double>(cluster.nodes - 1);
  cost.comm_seconds = ring.seconds(p_bytes) + ring.seconds(q_bytes);
  if (measured) {
    // As start-up timed them on every node at once: on cores the nodes share, the passes
    // contend for memory as in training, which the one-thread kPowerSgdPassesInSteps leaves out.
    cost.codec_seconds = measured->encode + measured->decode;
  } else {
    // The GEMMs at small r are bound by reading M, not by flops (kPowerSgdPassesInSteps): the
    // flops count only when they take longer than the passes.
    const double gemm_seconds = 6.0 * m * c * r / cluster.gemm_flops;
    const double pass_seconds = kPowerSgdPassesInSteps * m * c * cluster.step_seconds_per_float;
    cost.codec_seconds = std::max(gemm_seconds, pass_seconds);
  }
  cost.compute_seconds =
      cost.codec_seconds + (m * c + static_cast<double>(bias)) * cluster.step_seconds_per_float;
  return cost;
}

topo::SchemeModel powersgd_scheme_model(std::size_t rank) {
  topo::SchemeModel m;
  m.id = std::string(kPowerSgdScheme);
  m.compressed = true;
  m.fits = [](const topo::LayerProfile& layer) {
    return layer.weight_rows > 0 && layer.weight_cols > 0 &&
           layer.parameters == layer.weight_rows * layer.weight_cols + layer.weight_rows;
  };
  m.cost = [rank](const topo::SchemeCostInput& in, const topo::LayerProfile& layer) {
    return powersgd_cost(in.cluster, layer.weight_rows, layer.weight_cols, layer.weight_rows, rank,
                         layer.codec);
  };
  m.lanes = {{std::string(kPowerSgdLane), 1.0}};
  return m;
}

}  // namespace gradmesh::sync
