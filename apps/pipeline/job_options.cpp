#include "apps/pipeline/job_options.h"

#include <stdexcept>

#include "engine/error.h"

namespace gradmesh::app {

std::vector<tasks::LayerSpec> layer_specs(const JobConfig& config) {
  try {
    return tasks::parse_layer_specs(config.model.layers);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());  // names model.layers and the index already
  }
}

tasks::SgdOptions sgd_options(const JobConfig& config) {
  return tasks::SgdOptions{static_cast<float>(config.optimizer.lr),
                           static_cast<float>(config.optimizer.momentum),
                           static_cast<float>(config.optimizer.weight_decay)};
}

sync::SyncOptions sync_options(const JobConfig& config) {
  sync::SyncOptions options;
  options.ps.chunk_bytes = config.sync.ps.chunk_bytes;
  options.poseidon.sfb = config.sync.poseidon.sfb;
  options.poseidon.choose = config.sync.poseidon.choose;
  options.ako.partitions = config.sync.ako.partitions;
  options.ako.staleness = config.sync.ako.staleness;
  options.ako.bandwidth = config.sync.ako.bandwidth;
  options.ako.final_model =
      config.sync.ako.final_model == "fold" ? sync::AkoFinal::kFold : sync::AkoFinal::kAverage;
  options.ako.max_send_rate = config.net.max_send_rate;
  options.planner.probe = config.planner.probe;
  options.planner.alpha = config.planner.alpha;
  options.planner.bandwidth = config.planner.bandwidth;
  options.planner.gemm_flops = config.planner.gemm_flops;
  options.planner.message_overhead = config.planner.message_overhead;
  return options;
}

}  // namespace gradmesh::app
