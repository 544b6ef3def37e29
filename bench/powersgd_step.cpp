// bench/powersgd_step: what one PowerSGD step of one layer costs a node's CPU (issue 28), against
// the planner's model of it (sync/compress/powersgd/powersgd_model.h): compute_p, compute_q and
// decompress of a rows x cols matrix at rank r, one node (the all-reduces left out: the sums are
// this node's own factors) and the optimizer step on its output, each phase timed, and, for scale,
// one optimizer step over the same floats. Seconds per step (median of `runs`), the model's
// compute_seconds for the measured step rate and a GEMM rate given, and the ratio measured / model.
//
//   build/bench/bench_powersgd_step [--rows M] [--cols N] [--rank R] [--runs K] [--gemm FLOPS]
//   (defaults 4096 4096 4 9 2e10)
// A benchmark, never a test: its figures go in the docs, not in assertions.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sync/compress/powersgd/powersgd.h"
#include "sync/compress/powersgd/powersgd_model.h"
#include "tasks/cpu/blas.h"
#include "tasks/optim/optimizer.h"
#include "tasks/random.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t rows = 4096, cols = 4096, rank = 4, runs = 9;
  double gemm = 2e10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--rows")
      rows = std::strtoull(value, nullptr, 10);
    else if (flag == "--cols")
      cols = std::strtoull(value, nullptr, 10);
    else if (flag == "--rank")
      rank = std::strtoull(value, nullptr, 10);
    else if (flag == "--runs")
      runs = std::strtoull(value, nullptr, 10);
    else if (flag == "--gemm")
      gemm = std::strtod(value, nullptr);
    else {
      std::fprintf(stderr,
                   "usage: bench_powersgd_step [--rows M] [--cols N] [--rank R] [--runs K] "
                   "[--gemm FLOPS]\n");
      return 2;
    }
  }
  using Clock = std::chrono::steady_clock;
  gradmesh::tasks::cpu::set_blas_threads(1);
  gradmesh::sync::compress::PowerSgd psgd(rows, cols, rank, 7);
  const std::size_t r = psgd.rank();
  std::vector<float> gradient(rows * cols), p(rows * r), q(cols * r);
  gradmesh::tasks::SplitMix64 rng(1);
  for (float& g : gradient) g = rng.next_float() - 0.5f;
  std::vector<float> weights(rows * cols + rows, 0.01f), grads(rows * cols + rows, 0.001f);
  gradmesh::tasks::Optimizer optimizer({0.01f, 0.9f, 0.0f}, weights.size());

  // Phases: compute_p (M = g + e, P = M Q), compute_q (Q = M^T P_hat), decompress and the
  // optimizer step on the approximation (as PowerSgdScheme::apply runs them, fused by rows).
  std::vector<double> p_seconds, q_seconds, apply_seconds, optimizer_seconds;
  for (std::size_t run = 0; run < runs; ++run) {
    const auto t0 = Clock::now();
    psgd.compute_p(gradient, p);
    const auto t1 = Clock::now();
    psgd.compute_q(p, q);
    const auto t2 = Clock::now();
    psgd.decompress_each(p, q, 1, [&](std::size_t row, std::span<const float> block) {
      optimizer.step(row * cols, std::span<float>(weights).subspan(row * cols, block.size()),
                     block);
    });
    const auto t3 = Clock::now();
    optimizer.step(0, weights, grads);  // what the start-up probe times (tasks/profile.h)
    const auto t4 = Clock::now();
    p_seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
    q_seconds.push_back(std::chrono::duration<double>(t2 - t1).count());
    apply_seconds.push_back(std::chrono::duration<double>(t3 - t2).count());
    optimizer_seconds.push_back(std::chrono::duration<double>(t4 - t3).count());
  }
  const double optimizer_step = median(optimizer_seconds);
  const double per_float = optimizer_step / static_cast<double>(weights.size());
  const double apply = median(apply_seconds) - static_cast<double>(rows * cols) * per_float;
  const double measured = median(p_seconds) + median(q_seconds) + apply;
  gradmesh::topo::ClusterCost cluster{2, {1e-4, 1e9, 0.0}, 0.0, gemm, per_float};
  // The model's compute_seconds holds the step too: take it out to compare the PowerSGD part.
  const double model =
      gradmesh::sync::powersgd_cost(cluster, rows, cols, rows, rank).compute_seconds -
      static_cast<double>(weights.size()) * per_float;
  std::printf("%zu x %zu at rank %zu, one BLAS thread, median of %zu\n", rows, cols, r, runs);
  std::printf("optimizer step  %8.2f ms  (%.2f ns/float)\n", optimizer_step * 1e3, per_float * 1e9);
  std::printf("compute_p %.2f ms, compute_q %.2f ms, decompress with the step %.2f ms\n",
              median(p_seconds) * 1e3, median(q_seconds) * 1e3, median(apply_seconds) * 1e3);
  std::printf(
      "PowerSGD step   %8.2f ms  (the three, less one optimizer step)  model %.2f ms at "
      "%.3g FLOP/s  measured/model %.2f\n",
      measured * 1e3, model * 1e3, gemm, measured / model);
  return 0;
}
