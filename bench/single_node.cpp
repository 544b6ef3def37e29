// bench/single_node: how close one node's training comes to the machine's BLAS peak.
//
// Measures (1) OpenBLAS sgemm GFLOP/s on square matrices with the same thread count training uses,
// and (2) samples/s of strategy `none` on the demo model (MLP 784-256-256-10, batch 64), the CNN
// of configs/fashion-mnist-cnn.toml (--model cnn) or the ResNet-20-style graph of
// configs/fashion-mnist-resnet.toml (--model resnet) through the real node pipeline (engine graph,
// layers, SGD), then prints the model's achieved GFLOP/s — 3 x each layer's forward flops per
// sample (forward, then dW and dx backward; 6 x parameters for the MLP) — as a fraction of
// sgemm's, and each layer's forward and backward time (tasks::profile_layers, median of 20).
// The machine's state (bench/machine_state.h: triad bandwidth, a large and a small sgemm) is
// printed before and after.
//
// --rounds R (issue 29 item 5, "know why a run is fast or slow"): then R rounds, --gap seconds
// apart, each the machine's state, 200 iterations' samples/s and every layer's forward + backward
// time, one row a round; and per layer the spread (max / min over the rounds) beside the
// probes' and its correlation with the triad's time a byte and the small GEMM's time a flop, to
// tell the layers the host's memory mode moves from those it does not.
//
//   build/bench/bench_single_node [--model mlp|cnn|resnet] [--kernels onednn|builtin]
//                                 [--threads N] [--iterations N] [--batch N]
//                                 [--data DIR] [--ab slices]
//                                 [--rounds R] [--gap S]
// --ab slices: oneDNN's convolutions as batch slices side by side (cpu::set_convolution_slices)
// against one primitive on the whole team, alternated in one process (5 iterations each, 40
// rounds): a ratio the host's modes move little.
// A benchmark, never a test: its figures go in README.md, not in assertions.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "apps/config/job_config.h"
#include "apps/pipeline/iteration_graph.h"
#include "bench/machine_state.h"
#include "engine/executor.h"
#include "sync/lane_router.h"
#include "sync/sync_stage.h"
#include "tasks/cpu/blas.h"
#include "tasks/cpu/cpu_backend.h"
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

/// Pearson's correlation of x and y (0 when either is constant).
double correlation(const std::vector<double>& x, const std::vector<double>& y) {
  const auto n = static_cast<double>(x.size());
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) mx += x[i] / n, my += y[i] / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0.0;
}

double spread(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *lo > 0 ? *hi / *lo : 0.0;
}

/// --ab slices: the same trainer with cpu::convolution_slices off and on in turn, 5 iterations
/// each (after one untimed), 40 rounds, so both see the host's modes alike; prints each's
/// ms/iteration and their ratio every 10 rounds.
int ab_slices(gradmesh::app::IterationGraph& trainer) {
  constexpr int kRounds = 40, kSteps = 5;
  double seconds[2] = {0.0, 0.0};
  for (int round = 1; round <= kRounds; ++round) {
    for (const bool on : {false, true}) {
      gradmesh::tasks::cpu::set_convolution_slices(on);
      trainer.step();
      const auto start = Clock::now();
      for (int i = 0; i < kSteps; ++i) trainer.step();
      seconds[on ? 1 : 0] += seconds_since(start);
    }
    if (round % 10 == 0) {
      const double steps = static_cast<double>(round * kSteps);
      std::printf("after %d rounds: slices off %.1f ms/iteration, on %.1f: %.3fx\n", round,
                  1e3 * seconds[0] / steps, 1e3 * seconds[1] / steps, seconds[0] / seconds[1]);
    }
  }
  gradmesh::tasks::cpu::set_convolution_slices(true);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::size_t iterations = 2000;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string model_name = "mlp";
  std::size_t rounds = 0;
  std::string kernels = gradmesh::tasks::cpu::onednn_built() ? "onednn" : "builtin";
  double gap = 10.0;
  std::size_t batch = 64;
  std::string ab;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::strtoul(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--gap")) gap = std::strtod(argv[i + 1], nullptr);
    if (!std::strcmp(argv[i], "--model")) model_name = argv[i + 1];
    if (!std::strcmp(argv[i], "--kernels")) kernels = argv[i + 1];
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--iterations")) iterations = std::strtoul(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--data")) data_dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--batch")) batch = std::strtoul(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--ab")) ab = argv[i + 1];
  }
  if (kernels != "onednn" && kernels != "builtin") {
    std::fprintf(stderr, "--kernels: expected onednn or builtin, got '%s'\n", kernels.c_str());
    return 2;
  }
  gradmesh::tasks::cpu::set_kernels(kernels == "onednn"
                                        ? gradmesh::tasks::cpu::CpuKernels::kOnednn
                                        : gradmesh::tasks::cpu::CpuKernels::kBuiltin);
  gradmesh::tasks::cpu::set_threads(threads);
  std::printf("kernels: %s, %s\n", kernels.c_str(),
              gradmesh::tasks::cpu::host_backend().description().c_str());
  if (kernels == "builtin") {
    if (const std::string w = gradmesh::tasks::cpu::openblas_core_warning(); !w.empty())
      std::printf("warning: %s\n", w.c_str());
  }
  namespace bench = gradmesh::bench;
  std::printf("before: %s\n", bench::format_machine_state(bench::measure_machine_state()).c_str());

  const double peak = sgemm_gflops(1024);
  std::printf("sgemm 1024x1024x1024, %d thread(s): %.1f GFLOP/s\n", threads, peak);

  const auto data = gradmesh::tasks::load_fashion_mnist(data_dir);
  // The CNN's and the ResNet's layers are their configs' model.layers: one definition of each.
  std::vector<std::string> layer_texts;
  if (model_name == "cnn" || model_name == "resnet") {
    layer_texts =
        gradmesh::app::load_job_config(
            std::string(GRADMESH_SOURCE_DIR) + "/configs/fashion-mnist-" + model_name + ".toml", {})
            .model.layers;
  } else if (model_name == "mlp") {
    layer_texts = {"dense:256", "relu", "dense:256", "relu", "dense:10", "softmax_cross_entropy"};
  } else {
    std::fprintf(stderr, "--model: expected mlp, cnn or resnet, got '%s'\n", model_name.c_str());
    return 2;
  }
  const auto specs = gradmesh::tasks::parse_layer_specs(layer_texts);
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
  if (ab == "slices") return ab_slices(trainer);
  if (!ab.empty()) {
    std::fprintf(stderr, "--ab: expected slices, got '%s'\n", ab.c_str());
    return 2;
  }
  const auto start = Clock::now();
  for (std::size_t i = 0; i < iterations; ++i) trainer.step();
  const double elapsed = seconds_since(start);
  const double samples_per_s = static_cast<double>(iterations * batch) / elapsed;
  const double model_gflops = flops_per_sample * samples_per_s / 1e9;
  std::printf(
      "none, %s (%zu parameters, %.1f MFLOP per sample), batch %zu: %.0f samples/s (%.3f "
      "ms/iteration)\n",
      model_name == "cnn"      ? "CNN of configs/fashion-mnist-cnn.toml"
      : model_name == "resnet" ? "ResNet-20-style graph of configs/fashion-mnist-resnet.toml"
                               : "demo MLP 784-256-256-10",
      model.parameter_count(), flops_per_sample / 1e6, batch, samples_per_s,
      1e3 * elapsed / iterations);
  std::printf("model: %.1f GFLOP/s = %.2f of sgemm's %.1f GFLOP/s\n", model_gflops,
              model_gflops / peak, peak);
  const auto times = gradmesh::tasks::profile_layers(model, batch, 20, 42);
  std::printf("%-14s %-12s %10s %10s\n", "layer", "output", "fwd ms", "bwd ms");
  for (std::size_t l = 0; l < model.num_layers(); ++l) {
    const auto& layer = model.layer(l);
    std::printf("%-14s %-12s %10.3f %10.3f\n", model.layer_name(l).c_str(),
                gradmesh::tasks::to_string(layer.output_shape()).c_str(),
                1e3 * times.forward_seconds[l], 1e3 * times.backward_seconds[l]);
  }
  std::printf("after: %s\n", bench::format_machine_state(bench::measure_machine_state()).c_str());
  if (rounds == 0) return 0;

  // Rounds: the machine's state beside the model's, to see which layers move with it.
  const std::size_t layers = model.num_layers();
  std::vector<double> triad, sgemm, small, rate;
  std::vector<std::vector<double>> layer_ms(layers);
  std::printf("\n%-6s %8s %8s %8s %6s %10s", "round", "triad", "sgemm", "small", "steal",
              "samples/s");
  for (std::size_t l = 0; l < layers; ++l) {
    std::printf(" %10s", model.layer_name(l).c_str());
  }
  std::printf("\n%-6s %8s %8s %8s %6s %10s  (each layer: forward + backward ms, median of 5)\n", "",
              "GB/s", "GFLOP/s", "GFLOP/s", "%", "");
  for (std::size_t r = 0; r < rounds; ++r) {
    if (r > 0) std::this_thread::sleep_for(std::chrono::duration<double>(gap));
    const bench::MachineState m = bench::measure_machine_state();
    const auto t0 = Clock::now();
    for (int i = 0; i < 200; ++i) trainer.step();
    const double samples = 200.0 * static_cast<double>(batch) / seconds_since(t0);
    const auto t = gradmesh::tasks::profile_layers(model, batch, 5, 42 + r);
    triad.push_back(m.triad_gbps);
    sgemm.push_back(m.sgemm_gflops);
    small.push_back(m.small_gemm_gflops);
    rate.push_back(samples);
    std::printf("%-6zu %8.1f %8.1f %8.1f %6.1f %10.0f", r, m.triad_gbps, m.sgemm_gflops,
                m.small_gemm_gflops, 100 * m.steal, samples);
    for (std::size_t l = 0; l < layers; ++l) {
      layer_ms[l].push_back(1e3 * (t.forward_seconds[l] + t.backward_seconds[l]));
      std::printf(" %10.3f", layer_ms[l].back());
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  // A layer bound by memory takes longer when the triad is slow: its time correlates with the
  // triad's time a byte (1 / GB/s); one bound by compute, with the large sgemm's.
  std::vector<double> per_byte, per_flop, per_small;
  for (std::size_t r = 0; r < rounds; ++r) {
    per_byte.push_back(1.0 / triad[r]);
    per_flop.push_back(1.0 / sgemm[r]);
    per_small.push_back(1.0 / small[r]);
  }
  std::printf("\nspread (max / min): triad %.2f, sgemm %.2f, small gemm %.2f, samples/s %.2f\n",
              spread(triad), spread(sgemm), spread(small), spread(rate));
  std::printf("%-14s %8s %14s %14s %14s\n", "layer", "spread", "corr 1/triad", "corr 1/sgemm",
              "corr 1/small");
  for (std::size_t l = 0; l < layers; ++l) {
    std::printf("%-14s %8.2f %14.2f %14.2f %14.2f\n", model.layer_name(l).c_str(),
                spread(layer_ms[l]), correlation(layer_ms[l], per_byte),
                correlation(layer_ms[l], per_flop), correlation(layer_ms[l], per_small));
  }
  return 0;
}
