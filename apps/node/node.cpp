#include "apps/node/node.h"

#include <cstdio>
#include <memory>
#include <optional>

#include <spdlog/spdlog.h>

#include "apps/config/job_config.h"
#include "apps/pipeline/job_options.h"
#include "apps/pipeline/start_up.h"
#include "engine/error.h"
#include "tasks/data/fashion_mnist.h"
#include "tasks/data/synthetic.h"
#include "tasks/model.h"

namespace gradmesh::app {

int run_node(const NodeOptions& options) {
  return run_main([&] {
    std::optional<tasks::TrainTest> data;  // loaded once, kept over rollbacks
    // Synthetic data: the task, its test set in `data`, its training batches generated.
    std::optional<tasks::SyntheticTask> synthetic;
    run_with_recovery(options, [&data, &synthetic](Pipeline& pipeline) {
      const JobConfig& config = pipeline.config();
      check_data_keys(config);
      if (!data && config.data.dataset == "synthetic") {
        synthetic.emplace(input_shape(config), config.data.classes, config.job.seed);
        data.emplace();
        data->test = synthetic->make(tasks::kSyntheticTestBase,
                                     config.data.test_limit.value_or(kSyntheticTestCount));
        spdlog::info(
            "synthetic data: {} samples of {} in {} classes an epoch (generated per batch), a "
            "test set of {}",
            config.data.train_limit.value_or(kSyntheticTrainCount),
            tasks::to_string(synthetic->shape()), synthetic->classes(), data->test.count);
        if (config.data.normalize == "standardize") {
          spdlog::warn(
              "data.normalize = \"standardize\" does nothing for synthetic data: its inputs are "
              "of mean 0 already");
        }
      }
      if (!data) {
        try {
          data = tasks::load_fashion_mnist(config.data.path);
        } catch (const DataError& e) {  // the user's setting: a config error naming the key
          throw ConfigError("data.path = \"" + config.data.path + "\": " + e.what());
        }
        if (config.data.train_limit) {
          data->train = tasks::take_first(data->train, *config.data.train_limit);
        }
        if (config.data.test_limit) {
          data->test = tasks::take_first(data->test, *config.data.test_limit);
        }
        if (config.data.normalize == "standardize") {
          // The training set's pair for both sets: the test set stays unseen.
          const tasks::Standardization s = tasks::fit_standardization(data->train);
          tasks::standardize(data->train, s);
          tasks::standardize(data->test, s);
          spdlog::info("inputs standardized: mean {:.4f}, stddev {:.4f} (the training set's)",
                       s.mean, s.stddev);
        }
      }
      if (synthetic) {
        pipeline.set_source(std::make_unique<SyntheticSource>(
            *synthetic, config.data.train_limit.value_or(kSyntheticTrainCount)));
      } else {
        pipeline.set_source(std::make_unique<DatasetSource>(data->train));
      }
      pipeline.set_test_set(data->test);  // split across the nodes under a BSP strategy
    });
  });
}

}  // namespace gradmesh::app
