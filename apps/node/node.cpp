#include "apps/node/node.h"

#include <cstdio>
#include <memory>
#include <optional>

#include <spdlog/spdlog.h>

#include "apps/config/job_config.h"
#include "apps/node/metrics.h"
#include "apps/pipeline/job_options.h"
#include "apps/pipeline/start_up.h"
#include "engine/error.h"
#include "engine/executor.h"
#include "sync/compress/compression_profile.h"
#include "sync/compress/options.h"
#include "sync/lane_router.h"
#include "sync/probe/link_probe.h"
#include "sync/sync_stage.h"
#include "tasks/data/fashion_mnist.h"
#include "tasks/data/synthetic.h"
#include "tasks/model.h"
#include "tasks/optim/optimizer.h"
#include "tasks/profile.h"
#include "topo/rate.h"

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

int run_plan(const PlanOptions& options) {
  try {
    const JobConfig config = load_job_config(options.config, options.overrides);
    if (options.nodes == 0) throw ConfigError("--nodes must be >= 1");
    check_data_keys(config);
    check_optimizer_keys(config);
    const auto specs = layer_specs(config);
    // The plan needs the model's shapes only: the CPU backend, whatever compute.device says, on
    // the kernels compute.cpu_kernels names (the layer times it measures are theirs).
    tasks::cpu::set_kernels(cpu_kernels(config));
    tasks::Model model(specs, input_shape(config), config.optimizer.batch_size, config.job.seed);
    engine::Executor executor({1, 1});
    const std::string strategy = sync::strategy_for_nodes(config.sync.strategy, options.nodes);
    tasks::Optimizer optimizer(sgd_options(config), model.parameter_count(), adam_options(config));
    if (config.optimizer.weight_decay_exclude) {
      optimizer.exempt_from_weight_decay(model.weight_decay_exempt());
    }
    sync::LaneRouter router(nullptr, 0, options.nodes);
    sync::SyncOptions sync = sync_options(config);
    if (options.bandwidth && !sync.planner.bandwidth) {
      sync.planner.bandwidth = topo::parse_rate(*options.bandwidth);
    }
    // This machine's layer times and GEMM rate (no peers to measure links with: those come from
    // planner.alpha / planner.bandwidth / --bandwidth, else the planner's assumed rates).
    std::optional<sync::JobMeasurements> measured;
    if (config.planner.probe) {
      const tasks::ComputeProfile compute = tasks::profile_compute(
          model, config.optimizer.batch_size, options.nodes, config.job.seed, adam_options(config));
      measured.emplace();
      measured->forward_seconds = compute.times.forward_seconds;
      measured->backward_seconds = compute.times.backward_seconds;
      measured->backward_input_seconds = compute.times.backward_input_seconds;
      measured->gemm_flops = compute.gemm_flops;
      measured->step_seconds_per_float = compute.step_seconds_per_float;
      if (auto codec = sync::measure_compression(sync::compression_options(config.sync.options),
                                                 model, config.job.seed)) {
        measured->encode_seconds = std::move(codec->encode_seconds);
        measured->decode_seconds = std::move(codec->decode_seconds);
        measured->half_encode_seconds_per_float = codec->half_encode_seconds_per_float;
        measured->half_decode_seconds_per_float = codec->half_decode_seconds_per_float;
      }
      measured->links.nodes = 0;  // not measured
    }
    auto stage = sync::make_sync_stage(
        strategy,
        sync::SyncContext{model, executor, router, 0, options.nodes, config.optimizer.batch_size,
                          optimizer, sync, 0, measured ? &*measured : nullptr});
    const auto plan = stage->plan();
    std::printf(
        "plan for job '%s': strategy %s, %zu node(s), batch %zu per node, %zu parameters (rank "
        "0)\n",
        config.job.name.c_str(), strategy.c_str(), options.nodes, config.optimizer.batch_size,
        model.parameter_count());
    std::printf("%s", format_plan(plan).c_str());
    std::printf("%s", format_summary(stage->summary(), measured.has_value()).c_str());
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "gradmesh-node plan: configuration error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gradmesh-node plan: %s\n", e.what());
    return 1;
  }
}

}  // namespace gradmesh::app
