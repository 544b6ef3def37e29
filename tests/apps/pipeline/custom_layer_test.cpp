// A user's own layer and pre-processing task through the public API: the layer registry, the
// gradient check, a model built from a config naming the layer (apps/examples/custom_pipeline).

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <catch2/catch.hpp>

#include "apps/examples/custom_pipeline/leaky_relu.h"
#include "apps/examples/custom_pipeline/random_shift.h"
#include "engine/error.h"
#include "tasks/layers/gradient_check.h"
#include "tasks/layers/layer_registry.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/model.h"

namespace tasks = gradmesh::tasks;

namespace {

void register_once() {
  if (!tasks::is_registered_layer("leaky_relu")) {
    tasks::register_layer("leaky_relu", custom::LeakyRelu::make);
  }
}

}  // namespace

TEST_CASE("a user's layer passes the public gradient check", "[pipeline]") {
  custom::LeakyRelu layer(tasks::Shape{2, 3, 3}, 0.1f);
  const tasks::GradientCheckResult result = tasks::check_layer_gradients(layer);
  INFO(result.describe());
  CHECK(result.ok());
  CHECK(result.checked + result.skipped == 3 * 18);  // every input of a batch of 3; no parameters
  CHECK(result.checked >= 50);                       // kinks at 0 are rare for random inputs
}

TEST_CASE("the public gradient check catches a wrong backward pass", "[pipeline]") {
  // A leaky relu whose backward forgets the slope: right for positive inputs only.
  class Wrong final : public tasks::Layer {
   public:
    Wrong() : Layer(tasks::Shape::flat(8), tasks::Shape::flat(8)) {}
    std::string_view kind() const noexcept override { return "wrong"; }
    void forward(const float* x, float* y, std::size_t batch) override {
      for (std::size_t i = 0; i < batch * 8; ++i) y[i] = x[i] > 0 ? x[i] : 0.5f * x[i];
    }
    void backward(const float* x, const float*, const float* dy, float* dx,
                  std::size_t batch) override {
      for (std::size_t i = 0; i < batch * 8; ++i) dx[i] = x[i] > 0 ? dy[i] : 0.0f;
    }
  } wrong;
  const tasks::GradientCheckResult result = tasks::check_layer_gradients(wrong);
  CHECK_FALSE(result.ok());
  CHECK(result.mismatches.size() >= 5);
  CHECK_THAT(result.describe(), Catch::Contains("input"));
}

TEST_CASE("a registered layer kind is named in model.layers like a built-in one", "[pipeline]") {
  register_once();
  const auto specs =
      tasks::parse_layer_specs({"dense:16", "leaky_relu:0.2", "dense:10", "softmax_cross_entropy"});
  REQUIRE(specs[1].kind == "leaky_relu");
  CHECK(specs[1].args == "0.2");
  CHECK(tasks::to_string(specs[1]) == "leaky_relu:0.2");
  CHECK(tasks::parse_layer_spec("leaky_relu") == tasks::LayerSpec{"leaky_relu"});

  tasks::Model model(specs, 12, 4, 3);
  REQUIRE(model.num_layers() == 3);
  CHECK(model.layer(1).kind() == "leaky_relu");
  std::vector<float> x(4 * 12);
  std::iota(x.begin(), x.end(), -20.0f);
  const std::vector<std::int32_t> y = {0, 1, 2, 3};
  CHECK(std::isfinite(model.forward_backward(x, y)));

  // A bad argument is the factory's ConfigError, prefixed with where it is.
  try {
    tasks::Model bad(
        tasks::parse_layer_specs({"dense:16", "leaky_relu:2", "dense:10", "softmax_cross_entropy"}),
        12, 4, 3);
    FAIL("a slope of 2 was accepted");
  } catch (const gradmesh::ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("model.layers[1]") && Catch::Contains("slope"));
  }
}

TEST_CASE("unknown layer kinds list the registered ones, kinds register once", "[pipeline]") {
  register_once();
  try {
    (void)tasks::parse_layer_spec("swish");
    FAIL("an unknown kind was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::Contains("'leaky_relu[:<args>]'") && Catch::Contains("swish"));
  }
  CHECK_THROWS_AS(tasks::register_layer("leaky_relu", custom::LeakyRelu::make),
                  gradmesh::ContractError);
  CHECK_THROWS_AS(tasks::register_layer("dense", custom::LeakyRelu::make), gradmesh::ContractError);
  CHECK_THROWS_AS(tasks::register_layer("bad kind", custom::LeakyRelu::make),
                  gradmesh::ContractError);
}

TEST_CASE("the example's random shift moves each image and is reproducible", "[pipeline]") {
  const tasks::Shape shape{1, 5, 5};
  std::vector<float> images(3 * 25);
  std::iota(images.begin(), images.end(), 1.0f);
  const std::vector<float> original = images;
  std::vector<std::int32_t> labels(3);
  gradmesh::app::Batch batch{images, labels, 2, 7};
  custom::RandomShift shift(shape, 2, 42, 1);
  shift(batch);
  // Every output pixel is 0 (shifted in) or a pixel of the same image.
  for (std::size_t s = 0; s < 3; ++s) {
    for (std::size_t i = 0; i < 25; ++i) {
      const float v = images[s * 25 + i];
      CHECK((v == 0.0f || (v >= original[s * 25] && v <= original[s * 25 + 24])));
    }
  }
  CHECK(images != original);
  std::vector<float> again = original;
  gradmesh::app::Batch batch2{again, labels, 2, 7};
  custom::RandomShift(shape, 2, 42, 1)(batch2);
  CHECK(again == images);
}

TEST_CASE("a config checker may accept layer kinds only another program registers", "[pipeline]") {
  CHECK_THROWS_AS(tasks::parse_layer_spec("only_elsewhere:3"), std::invalid_argument);
  {
    const tasks::AcceptUnknownLayerKinds scope;
    CHECK(tasks::parse_layer_spec("only_elsewhere:3") ==
          tasks::LayerSpec{"only_elsewhere", 0, 0, 0, 0, 0.0, "3"});
    // Built-in kinds keep their checks.
    CHECK_THROWS_AS(tasks::parse_layer_spec("dense:0"), std::invalid_argument);
  }
  CHECK_FALSE(tasks::AcceptUnknownLayerKinds::active());
  CHECK_THROWS_AS(tasks::parse_layer_spec("only_elsewhere:3"), std::invalid_argument);
}
