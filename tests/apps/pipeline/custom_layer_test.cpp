// A user's own layer, loss, pre-processing task and compressor through the public API: the
// registries, the gradient check, a model built from a config naming the layer, the compressor's
// bounds and its name in a config (apps/examples/custom_pipeline).

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "apps/config/job_config.h"
#include "apps/examples/custom_pipeline/label_smoothing.h"
#include "apps/examples/custom_pipeline/leaky_relu.h"
#include "apps/examples/custom_pipeline/random_shift.h"
#include "apps/examples/custom_pipeline/scaled_int16.h"
#include "engine/error.h"
#include "sync/compress/options.h"
#include "tasks/layers/gradient_check.h"
#include "tasks/layers/layer_registry.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/layers/loss.h"
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

namespace {

void register_loss_once() {
  if (!tasks::is_registered_loss("label_smoothing")) {
    tasks::register_loss("label_smoothing", custom::LabelSmoothing::make);
  }
}

}  // namespace

TEST_CASE("a user's loss has the gradient of its loss, by finite differences", "[pipeline]") {
  const std::size_t batch = 3, classes = 5;
  std::vector<float> z(batch * classes);
  for (std::size_t i = 0; i < z.size(); ++i) z[i] = 0.37f * static_cast<float>(i % 7) - 1.1f;
  const std::vector<std::int32_t> y = {0, 3, 4};
  custom::LabelSmoothing loss(classes, 0.2);
  std::vector<float> dz(z.size());
  const float value = loss.forward_backward(z, y, classes, dz);
  CHECK(value == Approx(loss.loss(z, y, classes)));
  for (std::size_t i = 0; i < z.size(); ++i) {
    const float h = 1e-2f;
    std::vector<float> plus = z, minus = z;
    plus[i] += h;
    minus[i] -= h;
    const double numeric =
        (static_cast<double>(loss.loss(plus, y, classes)) - loss.loss(minus, y, classes)) /
        (2.0 * h);
    CHECK(dz[i] == Approx(numeric).margin(1e-4));
  }
}

TEST_CASE("a registered loss ends model.layers and trains the model", "[pipeline]") {
  register_loss_once();
  const auto specs = tasks::parse_layer_specs({"dense:16", "relu", "dense:4", "label_smoothing:0"});
  REQUIRE(specs.back().kind == "label_smoothing");
  CHECK(specs.back().args == "0");
  // With eps = 0 the user's loss is softmax cross-entropy: the same loss and gradients as the
  // built-in one (up to summation order).
  tasks::Model mine(specs, 6, 4, 11);
  auto builtin_specs = specs;
  builtin_specs.back() = tasks::LayerSpec{"softmax_cross_entropy"};
  tasks::Model builtin(builtin_specs, 6, 4, 11);
  std::vector<float> x(4 * 6);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
  const std::vector<std::int32_t> y = {0, 1, 2, 3};
  CHECK(mine.forward_backward(x, y) == Approx(builtin.forward_backward(x, y)).epsilon(1e-6));
  const auto a = mine.gradients(), b = builtin.gradients();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-6));
  // The evaluation reports the model's own loss.
  tasks::Dataset d;
  d.count = 4;
  d.features = 6;
  d.classes = 4;
  d.x = x;
  d.y = y;
  CHECK(mine.evaluate(d).loss == Approx(builtin.evaluate(d).loss).epsilon(1e-6));
  tasks::Model smoothed(
      tasks::parse_layer_specs({"dense:16", "relu", "dense:4", "label_smoothing:0.3"}), 6, 4, 11);
  CHECK(smoothed.evaluate(d).loss > builtin.evaluate(d).loss);
}

TEST_CASE("a loss is last, named right, and registered once beside the layer kinds", "[pipeline]") {
  register_once();
  register_loss_once();
  try {
    (void)tasks::parse_layer_specs({"dense:4", "label_smoothing", "relu"});
    FAIL("a loss in the middle was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::Contains("model.layers[1]") && Catch::Contains("last entry"));
  }
  try {
    (void)tasks::parse_layer_specs({"dense:4", "leaky_relu"});
    FAIL("a list without a loss was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::Contains("register_loss") && Catch::Contains("leaky_relu"));
  }
  try {
    (void)tasks::parse_layer_spec("label_smoothin:0.1");
    FAIL("an unknown kind was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::Contains("did you mean 'label_smoothing'"));
  }
  try {
    tasks::Model bad(tasks::parse_layer_specs({"dense:4", "label_smoothing:1.5"}), 3, 2, 1);
    FAIL("eps 1.5 was accepted");
  } catch (const gradmesh::ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("model.layers[1]") && Catch::Contains("eps"));
  }
  CHECK_THROWS_AS(tasks::register_loss("leaky_relu", custom::LabelSmoothing::make),
                  gradmesh::ContractError);
  CHECK_THROWS_AS(tasks::register_layer("label_smoothing", custom::LeakyRelu::make),
                  gradmesh::ContractError);
  CHECK_THROWS_AS(tasks::register_loss("softmax_cross_entropy", custom::LabelSmoothing::make),
                  gradmesh::ContractError);
  CHECK(tasks::registered_losses() == std::vector<std::string>{"label_smoothing"});
  // A config checker for another program (gradmesh-launch --node) takes an unknown last kind as
  // that program's loss.
  const tasks::AcceptUnknownLayerKinds scope;
  CHECK(tasks::parse_layer_specs({"dense:4", "focal:2"}).back().kind == "focal");
}

TEST_CASE("the example's top-k accuracy counts a label among the k largest logits", "[pipeline]") {
  const std::vector<float> logits = {0.1f, 0.5f, 0.4f,   // label 2: second
                                     0.9f, 0.0f, 0.1f,   // label 0: first
                                     0.2f, 0.2f, 0.1f};  // label 1: tie with class 0, after it
  const std::vector<std::int32_t> labels = {2, 0, 1};
  CHECK(custom::top_k_accuracy(logits, labels, 3, 1) == Approx(1.0 / 3));
  CHECK(custom::top_k_accuracy(logits, labels, 3, 2) == Approx(1.0));
  CHECK(custom::top_k_accuracy({}, {}, 3, 2) == 0.0);
}

TEST_CASE(
    "the example's compressor: within half a step of its scale, NaN travels, and a config names it",
    "[pipeline][compress]") {
  namespace compress = gradmesh::sync::compress;
  if (compress::find_compressor("int16") == nullptr) {
    compress::register_compressor(custom::scaled_int16_compressor());
  }
  const std::vector<float> g = {0.5f, -3.25f, 1e-6f, 0.0f, 2.0f, -0.001f, 3.25f};
  std::unique_ptr<compress::Compressor> c =
      compress::make_compressor("int16", g.size(), compress::CompressorParams{}, false);
  std::vector<std::byte> wire(c->encoded_bytes());
  CHECK(wire.size() == 4 + 2 * g.size());
  std::vector<float> error(g.size());
  c->encode(g, wire, 0, error.data());
  std::vector<float> back(g.size());
  c->decode(wire, back, 0);
  const float scale = 3.25f / 32767.0f;
  for (std::size_t i = 0; i < g.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(back[i] - g[i]) <= 0.5f * scale * 1.0001f);
    CHECK(back[i] + error[i] == g[i]);  // the error is exact (Sterbenz)
  }
  CHECK(back[1] == -3.25f);  // the largest magnitude is a whole step: exact
  std::vector<float> bad = g;
  bad[2] = std::nanf("");
  c->encode(bad, wire, 1, nullptr);
  c->decode(wire, back, 1);
  for (const float v : back) CHECK(std::isnan(v));
  // A config names it like a built-in compressor; an unregistered name is refused, naming the key,
  // unless a checker for another program accepts it (gradmesh-launch --node).
  CHECK(gradmesh::sync::compression_bases("int16") ==
        std::vector<std::string_view>{"ps", "allreduce"});
  const auto config = [](const std::string& method) {
    return gradmesh::app::parse_job_config(
        "[model]\nlayers = [\"dense:10\"]\n[sync.compression]\nmethod = \"" + method + "\"\n",
        "test", {});
  };
  CHECK(config("int16").sync.options.text("compression.method") == "int16");
  try {
    (void)config("int12");
    FAIL("int12 was accepted");
  } catch (const gradmesh::ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("sync.compression.method") && Catch::Contains("int16"));
  }
  const compress::AcceptUnknownCompressors scope;
  CHECK(config("int12").sync.options.text("compression.method") == "int12");
}
