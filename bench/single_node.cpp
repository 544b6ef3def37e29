// bench/single_node: how close one node's training comes to the machine's BLAS peak.
//
// Measures (1) OpenBLAS sgemm GFLOP/s on square matrices with the same thread count training uses,
// and (2) samples/s of strategy `none` on the demo model (MLP 784-256-256-10, batch 64) or the CNN
// of configs/fashion-mnist-cnn.toml (--model cnn) through the real node pipeline (engine graph,
// layers, SGD), then prints the model's achieved GFLOP/s — 3 x each layer's forward flops per
// sample (forward, then dW and dx backward; 6 x parameters for the MLP) — as a fraction of
// sgemm's, and each layer's forward and backward time (tasks::profile_layers, median of 20).
//
//   build/bench/bench_single_node [--model mlp|cnn] [--threads N] [--iterations N] [--data DIR]
// A benchmark, never a test: its figures go in README.md, not in assertions.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "apps/pipeline/iteration_graph.h"
#include "engine/executor.h"
#include "sync/lane_router.h"
#include "sync/sync_stage.h"
#include "tasks/cpu/blas.h"
#include "tasks/data/fashion_mnist.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/model.h"
#include "tasks/profile.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double sgemm_gflops(std::size_t n) {
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.0f);
  gradmesh::tasks::cpu::sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(),
                              n);  // warm-up
  int reps = 0;
  const auto start = Clock::now();
  do {
    gradmesh::tasks::cpu::sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                                c.data(), n);
    ++reps;
  } while (seconds_since(start) < 2.0);
  return 2.0 * static_cast<double>(n * n * n) * reps / seconds_since(start) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::size_t iterations = 2000;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string model_name = "mlp";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model")) model_name = argv[i + 1];
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--iterations")) iterations = std::strtoul(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--data")) data_dir = argv[i + 1];
  }
  gradmesh::tasks::cpu::set_blas_threads(threads);

  const double peak = sgemm_gflops(1024);
  std::printf("sgemm 1024x1024x1024, %d BLAS thread(s): %.1f GFLOP/s\n", threads, peak);

  const auto data = gradmesh::tasks::load_fashion_mnist(data_dir);
  const std::size_t batch = 64;
  const bool cnn = model_name == "cnn";
  if (!cnn && model_name != "mlp") {
    std::fprintf(stderr, "--model: expected mlp or cnn, got '%s'\n", model_name.c_str());
    return 2;
  }
  const auto specs = gradmesh::tasks::parse_layer_specs(
      cnn ? std::vector<std::string>{"conv2d:32:5:1:2", "relu", "max_pool2d:2", "conv2d:64:5:1:2",
                                     "relu", "max_pool2d:2", "flatten", "dense:1024", "relu",
                                     "dense:10", "softmax_cross_entropy"}
          : std::vector<std::string>{"dense:256", "relu", "dense:256", "relu", "dense:10",
                                     "softmax_cross_entropy"});
  gradmesh::tasks::Model model(specs, gradmesh::tasks::sample_shape(data.train), batch, 42);
  double flops_per_sample = 0;
  for (std::size_t l = 0; l < model.num_layers(); ++l) {
    if (model.layer(l).parameter_count() > 0)
      flops_per_sample += 3.0 * model.layer(l).forward_flops();
  }
  gradmesh::engine::Executor executor({1, 1});
  gradmesh::tasks::Optimizer optimizer({0.05f, 0.9f, 0.0f}, model.parameter_count());
  gradmesh::sync::LaneRouter router(nullptr, 0, 1);
  auto stage = gradmesh::sync::make_sync_stage(
      "none", gradmesh::sync::SyncContext{model, executor, router, 0, 1, batch, optimizer, {}});
  gradmesh::app::DatasetSource source(data.train);
  const gradmesh::app::ShardInfo shard{0, 1, batch, 42};
  const std::size_t per_epoch = source.open(shard);
  gradmesh::app::IterationGraph trainer(model, source, {}, executor, *stage, shard, per_epoch);

  for (int i = 0; i < 50; ++i) trainer.step();  // warm-up
  const auto start = Clock::now();
  for (std::size_t i = 0; i < iterations; ++i) trainer.step();
  const double elapsed = seconds_since(start);
  const double samples_per_s = static_cast<double>(iterations * batch) / elapsed;
  const double model_gflops = flops_per_sample * samples_per_s / 1e9;
  std::printf(
      "none, %s (%zu parameters, %.1f MFLOP per sample), batch %zu: %.0f samples/s (%.3f "
      "ms/iteration)\n",
      cnn ? "CNN of configs/fashion-mnist-cnn.toml" : "demo MLP 784-256-256-10",
      model.parameter_count(), flops_per_sample / 1e6, batch, samples_per_s,
      1e3 * elapsed / iterations);
  std::printf("model: %.1f GFLOP/s = %.2f of sgemm's %.1f GFLOP/s\n", model_gflops,
              model_gflops / peak, peak);
  const auto times = gradmesh::tasks::profile_layers(model, batch, 20, 42);
  std::printf("%-14s %-12s %10s %10s\n", "layer", "output", "fwd ms", "bwd ms");
  for (std::size_t l = 0; l < model.num_layers(); ++l) {
    const auto& layer = model.layer(l);
    std::printf("%-14s %-12s %10.3f %10.3f\n",
                (std::string(layer.kind()) + std::to_string(l)).c_str(),
                gradmesh::tasks::to_string(layer.output_shape()).c_str(),
                1e3 * times.forward_seconds[l], 1e3 * times.backward_seconds[l]);
  }
  return 0;
}
