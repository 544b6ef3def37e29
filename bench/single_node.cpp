// bench/single_node: how close one node's training comes to the machine's BLAS peak.
//
// Measures (1) OpenBLAS sgemm GFLOP/s on square matrices with the same thread count training uses,
// and (2) samples/s of strategy `none` on the demo model (MLP 784-256-256-10, batch 64) through the
// real node pipeline (engine graph, layers, SGD), then prints the model's achieved GFLOP/s —
// about 6 x parameters flops per sample (2 forward, 4 backward) — as a fraction of sgemm's.
//
//   build/bench/bench_single_node [--threads N] [--iterations N] [--data DIR]
// A benchmark, never a test: its figures go in README.md, not in assertions.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "apps/node/trainer.h"
#include "engine/executor.h"
#include "sync/channel.h"
#include "sync/sync_stage.h"
#include "tasks/cpu/blas.h"
#include "tasks/data/fashion_mnist.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/model.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double sgemm_gflops(std::size_t n) {
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.0f);
  gradmesh::tasks::cpu::sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                              c.data(), n);  // warm-up
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
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--iterations")) iterations = std::strtoul(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--data")) data_dir = argv[i + 1];
  }
  gradmesh::tasks::cpu::set_blas_threads(threads);

  const double peak = sgemm_gflops(1024);
  std::printf("sgemm 1024x1024x1024, %d BLAS thread(s): %.1f GFLOP/s\n", threads, peak);

  const auto data = gradmesh::tasks::load_fashion_mnist(data_dir);
  const std::size_t batch = 64;
  const auto specs = gradmesh::tasks::parse_layer_specs(
      {"dense:256", "relu", "dense:256", "relu", "dense:10", "softmax_cross_entropy"});
  gradmesh::tasks::Model model(specs, data.train.features, batch, 42);
  gradmesh::engine::Executor executor({1, 1});
  gradmesh::tasks::Optimizer optimizer({0.05f, 0.9f, 0.0f}, model.parameter_count());
  gradmesh::sync::Channel channel(nullptr, 0, 1);
  auto stage = gradmesh::sync::make_sync_stage(
      "none", gradmesh::sync::SyncContext{model, executor, channel, 0, 1, batch, optimizer, {}});
  gradmesh::app::Trainer trainer(model, data.train, executor, *stage, {0, 1, batch, 42});

  for (int i = 0; i < 50; ++i) trainer.step();  // warm-up
  const auto start = Clock::now();
  for (std::size_t i = 0; i < iterations; ++i) trainer.step();
  const double elapsed = seconds_since(start);
  const double samples_per_s = static_cast<double>(iterations * batch) / elapsed;
  const double model_gflops = 6.0 * static_cast<double>(model.parameter_count()) * samples_per_s / 1e9;
  std::printf("none, demo MLP 784-256-256-10 (%zu parameters), batch %zu: %.0f samples/s (%.3f ms/iteration)\n",
              model.parameter_count(), batch, samples_per_s, 1e3 * elapsed / iterations);
  std::printf("model: %.1f GFLOP/s = %.2f of sgemm's %.1f GFLOP/s\n", model_gflops,
              model_gflops / peak, peak);
  return 0;
}
