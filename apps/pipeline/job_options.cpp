#include "apps/pipeline/job_options.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "engine/error.h"
#include "tasks/data/fashion_mnist.h"

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

std::optional<tasks::AdamOptions> adam_options(const JobConfig& config) {
  if (config.optimizer.algorithm == "sgd") return std::nullopt;
  return tasks::AdamOptions{
      static_cast<float>(config.optimizer.beta1), static_cast<float>(config.optimizer.beta2),
      static_cast<float>(config.optimizer.eps), config.optimizer.algorithm == "adamw"};
}

void check_optimizer_keys(const JobConfig& config) {
  // An asynchronous strategy (ako) applies its peers' updates, not gradients an optimizer steps.
  if (config.optimizer.algorithm != "sgd" &&
      !sync::strategy_traits(config.sync.strategy).any_optimizer) {
    throw ConfigError("optimizer.algorithm = \"" + config.optimizer.algorithm +
                      "\" with sync.strategy = \"" + config.sync.strategy +
                      "\": " + config.sync.strategy +
                      " sends and applies its peers' updates (SGD's, momentum folded in), not "
                      "gradients an optimizer steps; use optimizer.algorithm = \"sgd\" with it, "
                      "or a strategy that steps the job's optimizer (" +
                      sync::strategies_with(&sync::StrategyTraits::any_optimizer) + ") with " +
                      config.optimizer.algorithm);
  }
  // SyncBN normalizes by the batch of one model on every node: Ako's replicas differ.
  if (config.model.sync_batch_norm && sync::strategy_traits(config.sync.strategy).live_membership) {
    throw ConfigError(
        "model.sync_batch_norm = true needs a BSP strategy (ps, poseidon, allreduce, "
        "auto; or none, one node, where it changes nothing), whose nodes hold one model; under " +
        config.sync.strategy +
        " each replica differs: leave it false (each node's own statistics)");
  }
}

void check_data_keys(const JobConfig& config) {
  if (config.data.dataset == "synthetic") return;
  const JobConfig::Data defaults;
  for (const auto& [key, set] :
       {std::pair{"data.shape", config.data.shape != defaults.shape},
        std::pair{"data.classes", config.data.classes != defaults.classes}}) {
    if (set) {
      throw ConfigError(std::string(key) + " applies to data.dataset = \"synthetic\"; \"" +
                        config.data.dataset + "\" has its own 1x28x28 images in 10 classes");
    }
  }
}

tasks::Shape input_shape(const JobConfig& config) {
  if (config.data.dataset != "synthetic") return tasks::kFashionMnistShape;
  const std::vector<std::size_t>& s = config.data.shape;
  return s.size() == 3 ? tasks::Shape{s[0], s[1], s[2]} : tasks::Shape::flat(s.at(0));
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
