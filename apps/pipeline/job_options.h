#pragma once
// From the job config to the options of the parts a node is made of (the model's layers, the
// optimizer, the sync stage). Used by Pipeline and by `gradmesh-node plan`.

#include <optional>
#include <vector>

#include "apps/config/job_config.h"
#include "sync/sync_stage.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/optim/adam.h"
#include "tasks/optim/sgd.h"
#include "tasks/shape.h"

namespace gradmesh::app {

/// model.layers parsed. Throws ConfigError naming model.layers[i] and what was expected.
[[nodiscard]] std::vector<tasks::LayerSpec> layer_specs(const JobConfig& config);

/// [optimizer] as the SGD rule's options. Never throws (the Optimizer checks ranges).
[[nodiscard]] tasks::SgdOptions sgd_options(const JobConfig& config);

/// Refuses data.shape or data.classes set away from their defaults for a data set on disk
/// (data.dataset = "fashion-mnist": its own 1 x 28 x 28 images in 10 classes): they describe what
/// synthetic data generates. Throws ConfigError naming the key. (A check across keys, so after
/// parse_job_config: a file may set them in any order.)
void check_data_keys(const JobConfig& config);

/// [optimizer] as Adam's options for optimizer.algorithm = "adam" or "adamw" (AdamW: decoupled),
/// nullopt for "sgd". Never throws (the Optimizer checks ranges).
[[nodiscard]] std::optional<tasks::AdamOptions> adam_options(const JobConfig& config);

/// Refuses optimizer.algorithm = "adam" / "adamw" with sync.strategy = "ako" (Ako sends and
/// applies its peers' updates, momentum folded in, not gradients an optimizer could step: its
/// rule is SGD's), and model.sync_batch_norm = true with it (its replicas differ: no one global
/// batch). Throws ConfigError naming both keys. (A check across keys, as
/// check_data_keys.)
void check_optimizer_keys(const JobConfig& config);

/// One sample's shape as data.dataset gives it: Fashion-MNIST's 1 x 28 x 28
/// (tasks::kFashionMnistShape), or data.shape for synthetic data ([F] as F x 1 x 1). Never throws.
[[nodiscard]] tasks::Shape input_shape(const JobConfig& config);

/// [sync], [planner] and net.max_send_rate as the sync stage's options. Never throws.
[[nodiscard]] sync::SyncOptions sync_options(const JobConfig& config);

}  // namespace gradmesh::app
