#include "tasks/profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "engine/error.h"
#include "tasks/cpu/blas.h"
#include "tasks/random.h"

namespace gradmesh::tasks {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

LayerTimes profile_layers(Model& model, std::size_t batch, std::size_t iterations,
                          std::uint64_t seed) {
  GRADMESH_CHECK_GT(iterations, std::size_t{0}, "profile_layers: timed iterations");
  SplitMix64 rng(seed);
  for (float& x : model.input(batch)) x = 2.0f * rng.next_float() - 1.0f;
  std::vector<std::int32_t> labels(batch);
  for (std::int32_t& y : labels) y = static_cast<std::int32_t>(rng.next_below(model.output_size()));

  constexpr std::size_t kWarmUp = 2;
  const std::size_t layers = model.num_layers();
  std::vector<std::vector<double>> forward(layers), backward(layers);
  for (std::size_t pass = 0; pass < kWarmUp + iterations; ++pass) {
    const bool timed = pass >= kWarmUp;
    for (std::size_t l = 0; l < layers; ++l) {
      const auto start = Clock::now();
      model.forward_layer(l, batch);
      if (timed) forward[l].push_back(seconds_since(start));
    }
    (void)model.loss_backward(labels);
    for (std::size_t l = layers; l-- > 0;) {
      const auto start = Clock::now();
      model.backward_layer(l, batch);
      if (timed) backward[l].push_back(seconds_since(start));
    }
  }
  LayerTimes times;
  for (std::size_t l = 0; l < layers; ++l) {
    times.forward_seconds.push_back(median(forward[l]));
    times.backward_seconds.push_back(median(backward[l]));
  }
  return times;
}

double measure_gemm_flops(std::size_t m, std::size_t n, std::size_t k, double min_seconds) {
  GRADMESH_CHECK(m > 0 && n > 0 && k > 0,
                 "measure_gemm_flops: shape " + std::to_string(m) + " x " + std::to_string(n) +
                     " x " + std::to_string(k) + " has a 0");
  GRADMESH_CHECK(std::isfinite(min_seconds) && min_seconds >= 0,
                 "measure_gemm_flops: min_seconds = " + std::to_string(min_seconds));
  SplitMix64 rng(0x9E3779B97F4A7C15ULL);
  std::vector<float> a(m * k), b(k * n), c(m * n, 0.0f);
  for (float& x : a) x = rng.next_float() - 0.5f;
  for (float& x : b) x = rng.next_float() - 0.5f;
  const auto gemm = [&] {
    cpu::sgemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  };
  gemm();  // warm-up: page faults, BLAS thread start-up
  std::size_t reps = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    gemm();
    ++reps;
    elapsed = seconds_since(start);
  } while (elapsed < min_seconds);
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) *
                       static_cast<double>(k) * static_cast<double>(reps);
  // A clock that did not tick (a tiny shape, min_seconds = 0) must not give +infinity.
  return flops / std::max(elapsed, 1e-9);
}

double median(std::span<double> values) {
  GRADMESH_CHECK(!values.empty(), "median of no values");
  const std::size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

ComputeProfile profile_compute(Model& model, std::size_t batch, std::size_t nodes,
                               std::uint64_t seed) {
  ComputeProfile profile;
  profile.times = profile_layers(model, batch, 5, seed);
  std::size_t rows = 1, cols = 1;  // the largest layer SFB may take: its costliest rebuild
  for (std::size_t l = 0; l < model.num_layers(); ++l) {
    if (model.layer(l).has_sufficient_factors() && model.layer(l).parameter_count() > rows * cols) {
      rows = model.layer(l).output_size();
      cols = model.layer(l).input_size();
    }
  }
  profile.gemm_flops = measure_gemm_flops(rows, cols, batch * std::max<std::size_t>(1, nodes), 0.05);
  return profile;
}

}  // namespace gradmesh::tasks
