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
  options.values = config.sync.options;
  options.max_send_rate = config.net.max_send_rate;
  options.planner.probe = config.planner.probe;
  options.planner.alpha = config.planner.alpha;
  options.planner.bandwidth = config.planner.bandwidth;
  options.planner.gemm_flops = config.planner.gemm_flops;
  options.planner.message_overhead = config.planner.message_overhead;
  return options;
}

}  // namespace gradmesh::app
