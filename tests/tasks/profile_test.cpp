// Tests for tasks/profile.h: per-layer times and the GEMM rate, bounded well under a second each.

#include "tasks/profile.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/error.h"
#include "tasks/layers/layer_spec.h"

namespace gradmesh::tasks {
namespace {

Model small_mlp() {
  return Model(parse_layer_specs(
                   {"dense:64", "relu", "dense:32", "relu", "dense:10", "softmax_cross_entropy"}),
               48, 16, 3);
}

}  // namespace

TEST_CASE("profile_layers times every layer and leaves the parameters alone", "[tasks][profile]") {
  Model model = small_mlp();
  const std::vector<float> before(model.parameters().begin(), model.parameters().end());
  const LayerTimes times = profile_layers(model, 16, 5, 11);
  REQUIRE(times.forward_seconds.size() == model.num_layers());
  REQUIRE(times.backward_seconds.size() == model.num_layers());
  REQUIRE(times.backward_input_seconds.size() == model.num_layers());
  for (std::size_t l = 0; l < model.num_layers(); ++l) {
    INFO("layer " << l << " (" << model.layer(l).kind() << ")");
    CHECK(std::isfinite(times.forward_seconds[l]));
    CHECK(std::isfinite(times.backward_seconds[l]));
    CHECK(times.forward_seconds[l] >= 0);
    CHECK(times.backward_seconds[l] >= 0);
    if (model.layer(l).parameter_count() > 0) {
      CHECK(times.forward_seconds[l] > 0);
      CHECK(times.backward_seconds[l] > 0);
      CHECK(times.forward_seconds[l] < 0.1);
    }
    if (model.layer(l).parameter_count() == 0) {
      CHECK(times.backward_input_seconds[l] == times.backward_seconds[l]);
    }
  }
  // Layer 0 (dense 48 -> 64) without dW computes nothing (no layer needs its dx): a call that
  // returns at once, against its full backward's dW GEMM of 2 x 16 x 48 x 64 flops.
  CHECK(times.backward_input_seconds[0] < times.backward_seconds[0]);
  for (std::size_t l = 0; l < model.num_layers(); ++l) {
    CHECK(model.layer(l).parameter_gradients_enabled());  // put back
  }
  REQUIRE(model.parameters().size() == before.size());
  CHECK(std::memcmp(model.parameters().data(), before.data(), before.size() * sizeof(float)) == 0);
  // It did run the model: the gradients were written.
  bool any_gradient = false;
  for (const float g : model.gradients()) any_gradient = any_gradient || g != 0.0f;
  CHECK(any_gradient);
}

TEST_CASE("profile_layers calls before_pass before each pass and passes its error on",
          "[tasks][profile]") {
  Model model = small_mlp();
  // The first call comes before any backward has written a gradient, every later one after.
  std::vector<bool> gradients_written;
  (void)profile_layers(model, 16, 3, 11, [&] {
    bool any = false;
    for (const float g : model.gradients()) any = any || g != 0.0f;
    gradients_written.push_back(any);
  });
  REQUIRE(gradients_written.size() == 3 + kProfileWarmUpPasses);
  CHECK_FALSE(gradients_written.front());
  for (std::size_t call = 1; call < gradients_written.size(); ++call) {
    INFO("call " << call);
    CHECK(gradients_written[call]);
  }
  CHECK_THROWS_AS(profile_layers(model, 16, 3, 11, [] { throw ContractError("barrier failed"); }),
                  ContractError);
}

TEST_CASE("profile_layers checks its arguments", "[tasks][profile]") {
  Model model = small_mlp();
  CHECK_THROWS_AS(profile_layers(model, 16, 0, 1), ContractError);
  CHECK_THROWS_AS(profile_layers(model, 17, 1, 1), ContractError);
  CHECK_THROWS_AS(profile_layers(model, 0, 1, 1), ContractError);
}

TEST_CASE("measure_step_seconds_per_float gives a plausible time", "[tasks][profile]") {
  const double step = measure_step_seconds_per_float(1 << 16, 0.01);
  CHECK(std::isfinite(step));
  CHECK(step > 0);
  CHECK(step < 1e-6);  // 20 bytes a float: slower than 20 MB/s is no machine's memory
  CHECK(std::isfinite(measure_step_seconds_per_float(1, 0)));
  CHECK_THROWS_AS(measure_step_seconds_per_float(0, 0.01), ContractError);
  CHECK_THROWS_AS(measure_step_seconds_per_float(4, -1), ContractError);
}

TEST_CASE("measure_gemm_flops gives a plausible rate", "[tasks][profile]") {
  const double flops = measure_gemm_flops(128, 128, 128, 0.05);
  CHECK(std::isfinite(flops));
  CHECK(flops > 1e8);
  // A shape too small for the clock still gives a finite rate.
  CHECK(std::isfinite(measure_gemm_flops(1, 1, 1, 0)));
  CHECK_THROWS_AS(measure_gemm_flops(0, 4, 4, 0.01), ContractError);
  CHECK_THROWS_AS(measure_gemm_flops(4, 4, 4, -1), ContractError);
  CHECK_THROWS_AS(measure_gemm_flops(4, 4, 4, std::nan("")), ContractError);
}

}  // namespace gradmesh::tasks

TEST_CASE("an Adam node's step time is measured on Adam's update", "[tasks][profile]") {
  // The path runs (a plausible, finite time); which is faster is a benchmark's question.
  const gradmesh::tasks::AdamOptions adam;
  const double step = measure_step_seconds_per_float(1 << 16, 0.01, adam);
  CHECK(std::isfinite(step));
  CHECK(step > 0);
  CHECK(step < 1e-6);  // a microsecond a float would be a thousand times a memory pass
}

TEST_CASE(
    "profile_compute says how many cores its compute got and calls between before the GEMM and the "
    "step and before_pass before each layer pass",
    "[tasks][profile]") {
  gradmesh::tasks::Model model = gradmesh::tasks::small_mlp();
  int between = 0;
  std::size_t passes = 0;
  const auto profile = gradmesh::tasks::profile_compute(
      model, 16, 2, 1, std::nullopt, [&] { ++between; }, [&] { ++passes; });
  CHECK(between == 2);
  CHECK(passes == gradmesh::tasks::kProfileWarmUpPasses + gradmesh::tasks::kProfileTimedPasses);
  INFO("cpu_cores " << profile.cpu_cores);
  CHECK(std::isfinite(profile.cpu_cores));
  CHECK(profile.cpu_cores > 0);  // it computed: some CPU time over the wall time
  CHECK(profile.gemm_flops > 0);
}
