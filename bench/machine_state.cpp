#include "bench/machine_state.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tasks/cpu/blas.h"

namespace gradmesh::bench {

namespace {

using Clock = std::chrono::steady_clock;

/// The shortest of the passes of `work` run for about `seconds` (at least one), in seconds.
template <typename Work>
double best_pass(double seconds, Work&& work) {
  double best = 1e30;
  const auto start = Clock::now();
  do {
    const auto t = Clock::now();
    work();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t).count());
  } while (std::chrono::duration<double>(Clock::now() - start).count() < seconds);
  return best;
}

double gemm_gflops(std::size_t m, std::size_t n, std::size_t k, double seconds) {
  std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f), c(m * n, 0.0f);
  const double pass = best_pass(seconds, [&] {
    tasks::cpu::sgemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  });
  return 2.0 * static_cast<double>(m * n * k) / pass / 1e9;
}

/// /proc/stat's first line: the steal ticks and all ticks (0, 0 where unreadable).
std::pair<double, double> steal_and_total() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  stat >> cpu;
  double total = 0, steal = 0, value = 0;
  for (int field = 0; field < 10 && stat >> value; ++field) {
    total += field < 8 ? value : 0.0;  // guest time is counted in user time already
    if (field == 7) steal = value;
  }
  return {steal, total};
}

}  // namespace

MachineState measure_machine_state(double seconds) {
  MachineState state;
  const auto [steal0, total0] = steal_and_total();
  constexpr std::size_t kFloats = std::size_t{8} << 20;  // 32 MiB an array
  std::vector<float> a(kFloats, 0.0f), b(kFloats, 1.0f), c(kFloats, 2.0f);
  const double pass = best_pass(seconds / 3, [&] {
    const float s = 0.5f;
    float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    const float* __restrict pc = c.data();
    for (std::size_t i = 0; i < kFloats; ++i) pa[i] = pb[i] + s * pc[i];
  });
  state.triad_gbps = 12.0 * static_cast<double>(kFloats) / pass / 1e9;
  state.sgemm_gflops = gemm_gflops(512, 512, 512, seconds / 3);
  state.small_gemm_gflops = gemm_gflops(64, 256, 784, seconds / 3);
  const auto [steal1, total1] = steal_and_total();
  if (total1 > total0) state.steal = (steal1 - steal0) / (total1 - total0);
  std::ifstream loadavg("/proc/loadavg");
  loadavg >> state.load_average;
  state.cores = std::thread::hardware_concurrency();
  return state;
}

std::string format_machine_state(const MachineState& state) {
  char line[200];
  std::snprintf(line, sizeof(line),
                "machine: triad %.1f GB/s, sgemm 512^3 %.1f GFLOP/s, sgemm 64x256x784 %.1f "
                "GFLOP/s, steal %.1f%%, load %.2f on %u cores",
                state.triad_gbps, state.sgemm_gflops, state.small_gemm_gflops, 100 * state.steal,
                state.load_average, state.cores);
  return line;
}

}  // namespace gradmesh::bench
