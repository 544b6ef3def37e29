// bench/nonfinite_guard: what the non-finite guard (issue 59; tasks/optim/non_finite.h) costs the
// optimizer step, the one pass every update goes through: Optimizer::step over one layer of
// `floats` floats with the check fused into the update loop (job.on_nonfinite = "stop") against
// the same step without it ("off"), alternated A, B, A, B, `runs` pairs; and copy_finite against
// std::copy (PS's received parameters). Seconds per call (median) and on/off ratios.
//
//   build/bench/bench_nonfinite_guard [--floats N] [--runs K]   (defaults 16777216 (a 4096 x
//   4096 layer) and 15)
// A benchmark, never a test: its figures go in the docs, not in assertions.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/machine_state.h"
#include "tasks/optim/non_finite.h"
#include "tasks/optim/optimizer.h"
#include "tasks/random.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Fn>
double timed(Fn&& fn) {
  const auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t floats = std::size_t{1} << 24, runs = 15;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--floats") {
      floats = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (flag == "--runs") {
      runs = std::strtoull(argv[i + 1], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: bench_nonfinite_guard [--floats N] [--runs K]\n");
      return 2;
    }
  }
  if (floats == 0 || runs == 0) {
    std::fprintf(stderr, "bench_nonfinite_guard: --floats and --runs > 0\n");
    return 2;
  }
  std::printf(
      "%s\n",
      gradmesh::bench::format_machine_state(gradmesh::bench::measure_machine_state()).c_str());
  gradmesh::tasks::SplitMix64 rng(1);
  std::vector<float> gradient(floats), weights(floats, 0.01f), copy(floats);
  for (float& g : gradient) g = (rng.next_float() - 0.5f) * 1e-3f;
  gradmesh::tasks::Optimizer on({0.01f, 0.9f, 1e-4f}, floats), off({0.01f, 0.9f, 1e-4f}, floats);
  off.set_non_finite_check(false);
  on.step(0, weights, gradient);  // first touch of both velocities
  off.step(0, weights, gradient);
  std::vector<double> t_on, t_off, t_copy_finite, t_copy, ratio_step, ratio_copy;
  bool finite = true;
  for (std::size_t r = 0; r < runs; ++r) {
    const double a = timed([&] { on.step(0, weights, gradient); });
    const double b = timed([&] { off.step(0, weights, gradient); });
    const double c = timed([&] { finite &= gradmesh::tasks::copy_finite(gradient, copy); });
    const double d = timed([&] { std::copy(gradient.begin(), gradient.end(), copy.begin()); });
    t_on.push_back(a);
    t_off.push_back(b);
    t_copy_finite.push_back(c);
    t_copy.push_back(d);
    ratio_step.push_back(a / b);
    ratio_copy.push_back(c / d);
  }
  if (!finite || on.non_finite().tripped()) std::printf("unexpected: a non-finite value\n");
  std::printf("%zu floats, %zu alternated pairs (medians)\n", floats, runs);
  std::printf("  optimizer step, guard on : %8.3f ms (%.3f ns a float)\n", 1e3 * median(t_on),
              1e9 * median(t_on) / static_cast<double>(floats));
  std::printf("  optimizer step, guard off: %8.3f ms (%.3f ns a float)\n", 1e3 * median(t_off),
              1e9 * median(t_off) / static_cast<double>(floats));
  std::printf("  on / off: median %.3f (range %.3f-%.3f)\n", median(ratio_step),
              *std::min_element(ratio_step.begin(), ratio_step.end()),
              *std::max_element(ratio_step.begin(), ratio_step.end()));
  std::printf("  copy_finite %8.3f ms, std::copy %8.3f ms: median ratio %.3f\n",
              1e3 * median(t_copy_finite), 1e3 * median(t_copy), median(ratio_copy));
  return 0;
}
