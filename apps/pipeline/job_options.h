#pragma once
// From the job config to the options of the parts a node is made of (the model's layers, the
// optimizer, the sync stage). Used by Pipeline and by `gradmesh-node plan`.

#include <vector>

#include "apps/config/job_config.h"
#include "sync/sync_stage.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/optim/sgd.h"

namespace gradmesh::app {

/// model.layers parsed. Throws ConfigError naming model.layers[i] and what was expected.
[[nodiscard]] std::vector<tasks::LayerSpec> layer_specs(const JobConfig& config);

/// [optimizer] as the SGD rule's options. Never throws (the Optimizer checks ranges).
[[nodiscard]] tasks::SgdOptions sgd_options(const JobConfig& config);

/// [sync], [planner] and net.max_send_rate as the sync stage's options. Never throws.
[[nodiscard]] sync::SyncOptions sync_options(const JobConfig& config);

}  // namespace gradmesh::app
