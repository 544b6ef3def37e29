#include "tasks/profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <string>
#include <vector>

#include "engine/error.h"
#include "tasks/cpu/blas.h"
#include "tasks/optim/adam.h"
#include "tasks/optim/sgd.h"
#include "tasks/random.h"

namespace gradmesh::tasks {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

LayerTimes profile_layers(Model& model, std::size_t batch, std::size_t iterations,
                          std::uint64_t seed, const std::function<void()>& before_pass) {
  GRADMESH_CHECK_GT(iterations, std::size_t{0}, "profile_layers: timed iterations");
  SplitMix64 rng(seed);
  for (float& x : model.input(batch)) x = 2.0f * rng.next_float() - 1.0f;
  std::vector<std::int32_t> labels(batch);
  for (std::int32_t& y : labels) y = static_cast<std::int32_t>(rng.next_below(model.output_size()));

  constexpr std::size_t kWarmUp = kProfileWarmUpPasses;
  const std::size_t layers = model.num_layers();
  // The layers' own state (batch normalization's running statistics) is put back after: the
  // timed passes run on random inputs, which must not enter the trained model.
  std::vector<std::vector<float>> state(layers);
  for (std::size_t l = 0; l < layers; ++l) {
    state[l].resize(model.layer(l).state_size());
    if (!state[l].empty()) model.layer(l).save_layer_state(state[l]);
  }
  std::vector<std::vector<double>> forward(layers), backward(layers), backward_input(layers);
  for (std::size_t pass = 0; pass < kWarmUp + iterations; ++pass) {
    const bool timed = pass >= kWarmUp;
    if (before_pass) before_pass();
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
      Layer& layer = model.layer(l);
      if (!layer.has_sufficient_factors() || layer.parameter_count() == 0) continue;
      // backward() overwrites dx and (when enabled) the gradient, so a second call on the same
      // dy times what SFB's backward does: dx only.
      const bool enabled = layer.parameter_gradients_enabled();
      layer.set_parameter_gradients_enabled(false);
      const auto again = Clock::now();
      model.backward_layer(l, batch);
      if (timed) backward_input[l].push_back(seconds_since(again));
      layer.set_parameter_gradients_enabled(enabled);
    }
  }
  for (std::size_t l = 0; l < layers; ++l) {
    if (!state[l].empty()) model.layer(l).load_layer_state(state[l]);
  }
  LayerTimes times;
  for (std::size_t l = 0; l < layers; ++l) {
    times.forward_seconds.push_back(median(forward[l]));
    times.backward_seconds.push_back(median(backward[l]));
    times.backward_input_seconds.push_back(backward_input[l].empty() ? times.backward_seconds.back()
                                                                     : median(backward_input[l]));
  }
  return times;
}

double measure_gemm_flops(std::size_t m, std::size_t n, std::size_t k, double min_seconds) {
  GRADMESH_CHECK(m > 0 && n > 0 && k > 0, "measure_gemm_flops: shape " + std::to_string(m) + " x " +
                                              std::to_string(n) + " x " + std::to_string(k) +
                                              " has a 0");
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

double measure_step_seconds_per_float(std::size_t floats, double min_seconds,
                                      const std::optional<AdamOptions>& adam) {
  GRADMESH_CHECK(floats > 0, "measure_step_seconds_per_float: floats = 0");
  GRADMESH_CHECK(std::isfinite(min_seconds) && min_seconds >= 0,
                 "measure_step_seconds_per_float: min_seconds = " + std::to_string(min_seconds));
  std::vector<float> w(floats, 0.5f), g(floats, 1e-3f), velocity(floats, 0.0f);
  std::vector<float> second(adam ? floats : 0, 0.0f);
  const SgdOptions options{0.01f, 0.9f, 1e-4f};
  const AdamStep scalars =
      adam ? adam_step_scalars(*adam, 1, options.lr, options.weight_decay) : AdamStep{};
  const auto update = [&] {
    if (adam) {
      adam_update(w.data(), g.data(), velocity.data(), second.data(), floats, *adam, scalars);
    } else {
      sgd_update(w.data(), g.data(), velocity.data(), floats, options);
    }
  };
  update();  // untimed: first touch
  std::size_t reps = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    update();
    ++reps;
    elapsed = seconds_since(start);
  } while (elapsed < min_seconds);
  return elapsed / (static_cast<double>(reps) * static_cast<double>(floats));
}

std::optional<double> process_cpu_seconds() noexcept {
  const std::clock_t now = std::clock();
  if (now == std::clock_t(-1)) return std::nullopt;
  return static_cast<double>(now) / CLOCKS_PER_SEC;
}

namespace {

/// measure_gemm_flops() for kGemmProbeSeconds on the GEMM that prices SFB's rebuild on `nodes`
/// nodes: the largest layer SFB may take (its costliest rebuild), M x N x nK.
double measure_model_gemm_flops(Model& model, std::size_t batch, std::size_t nodes) {
  std::size_t rows = 1, cols = 1;
  for (std::size_t l = 0; l < model.num_layers(); ++l) {
    if (model.layer(l).has_sufficient_factors() && model.layer(l).parameter_count() > rows * cols) {
      rows = model.layer(l).output_size();
      cols = model.layer(l).input_size();
    }
  }
  return measure_gemm_flops(rows, cols, batch * std::max<std::size_t>(1, nodes), kGemmProbeSeconds);
}

/// measure_step_seconds_per_float() for kStepProbeSeconds over the largest layer's parameters
/// (at most 4 Mi floats).
double measure_model_step_seconds(Model& model, const std::optional<AdamOptions>& adam) {
  std::size_t largest = 1;
  for (std::size_t l = 0; l < model.num_layers(); ++l) {
    largest = std::max(largest, model.layer(l).parameter_count());
  }
  return measure_step_seconds_per_float(std::min<std::size_t>(largest, std::size_t{1} << 22),
                                        kStepProbeSeconds, adam);
}

}  // namespace

ComputeProfile profile_rates(Model& model, std::size_t batch, std::size_t nodes,
                             const std::optional<AdamOptions>& adam) {
  ComputeProfile profile;
  profile.gemm_flops = measure_model_gemm_flops(model, batch, nodes);
  profile.step_seconds_per_float = measure_model_step_seconds(model, adam);
  return profile;
}

ComputeProfile profile_compute(Model& model, std::size_t batch, std::size_t nodes,
                               std::uint64_t seed, const std::optional<AdamOptions>& adam,
                               const std::function<void()>& between,
                               const std::function<void()>& before_pass) {
  ComputeProfile profile;
  // CPU and wall time over the measured parts, `between` and `before_pass` (the barriers, where a
  // node waits for the others) left out: `sign` -1 takes a part back out of a timed one.
  double cpu = 0, wall = 0;
  bool cpu_known = true;
  const auto count = [&](const auto& part, double sign) {
    const auto start = Clock::now();
    const std::optional<double> cpu_start = process_cpu_seconds();
    part();
    const std::optional<double> cpu_end = process_cpu_seconds();
    wall += sign * seconds_since(start);
    cpu_known = cpu_known && cpu_start && cpu_end;
    if (cpu_known) cpu += sign * (*cpu_end - *cpu_start);
  };
  const auto timed = [&](const auto& part) { count(part, 1.0); };
  std::function<void()> untimed_before_pass;
  if (before_pass) untimed_before_pass = [&] { count(before_pass, -1.0); };
  timed([&] {
    profile.times = profile_layers(model, batch, kProfileTimedPasses, seed, untimed_before_pass);
  });
  if (between) between();
  timed([&] { profile.gemm_flops = measure_model_gemm_flops(model, batch, nodes); });
  if (between) between();
  timed([&] { profile.step_seconds_per_float = measure_model_step_seconds(model, adam); });
  if (cpu_known && wall > 0) profile.cpu_cores = cpu / wall;
  return profile;
}

}  // namespace gradmesh::tasks
