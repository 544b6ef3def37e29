#include "tasks/model.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "engine/error.h"
#include "tasks/layers/dense.h"
#include "tasks/layers/dropout.h"
#include "tests/tasks/gradient_check.h"

namespace gradmesh::tasks {
namespace {

std::vector<LayerSpec> demo_specs() {
  return parse_layer_specs(
      {"dense:256", "relu", "dense:256", "relu", "dense:10", "softmax_cross_entropy"});
}

}  // namespace

TEST_CASE("Model parameter layout of the demo 784-256-256-10 MLP", "[tasks][model]") {
  Model m(demo_specs(), 784, 8, 1);
  REQUIRE(m.num_layers() == 5);
  CHECK(m.parameter_count() == 269322);
  CHECK(m.parameter_count() == 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10);
  CHECK(m.parameter_offset(0) == 0);
  CHECK(m.parameter_offset(1) == 784 * 256 + 256);
  CHECK(m.parameter_offset(2) == 784 * 256 + 256);  // relu has no parameters
  CHECK(m.parameter_offset(3) == 784 * 256 + 256 + 256 * 256 + 256);
  CHECK(m.parameter_offset(5) == m.parameter_count());
  CHECK(m.layer_parameters(1).empty());
  CHECK(m.layer_parameters(2).data() == m.parameters().data() + m.parameter_offset(2));
  CHECK(m.layer_gradients(4).size() == 256 * 10 + 10);
  CHECK(m.layer(4).kind() == "dense");
  CHECK(m.layer(3).kind() == "relu");
  CHECK(m.layer_name(4) == "dense4");
  CHECK(m.layer_name(1) == "relu1");
  CHECK_THROWS_AS((void)m.layer_name(5), gradmesh::ContractError);
  // Each float belongs to the layer whose range holds it; the relu (an empty range) to none.
  CHECK(m.layer_at_offset(0) == 0);
  CHECK(m.layer_at_offset(m.parameter_offset(1) - 1) == 0);
  CHECK(m.layer_at_offset(m.parameter_offset(2)) == 2);
  CHECK(m.layer_at_offset(m.parameter_offset(4)) == 4);
  CHECK(m.layer_at_offset(m.parameter_count() - 1) == 4);
  CHECK_THROWS_AS((void)m.layer_at_offset(m.parameter_count()), gradmesh::ContractError);
  auto& dense = dynamic_cast<Dense&>(m.layer(0));
  CHECK(dense.weights().data() == m.parameters().data());
  CHECK(m.output_size() == 10);
  CHECK_THROWS_AS(m.layer(5), ContractError);
}

TEST_CASE("Model init is identical for the same seed", "[tasks][model]") {
  const auto specs = parse_layer_specs({"dense:16", "relu", "dense:3", "softmax_cross_entropy"});
  Model a(specs, 8, 4, 42), b(specs, 8, 4, 42), c(specs, 8, 4, 43);
  CHECK(std::equal(a.parameters().begin(), a.parameters().end(), b.parameters().begin()));
  CHECK(!std::equal(a.parameters().begin(), a.parameters().end(), c.parameters().begin()));
  // Layers get different streams: layer 0 and layer 2 do not start with the same numbers.
  CHECK(a.layer_parameters(0)[0] != a.layer_parameters(2)[0]);
}

TEST_CASE("Model rejects bad construction", "[tasks][model]") {
  CHECK_THROWS_AS(Model({}, 4, 2, 0), ConfigError);
  CHECK_THROWS_AS(Model({{"softmax_cross_entropy", 0}, {"dense", 2}}, 4, 2, 0), ConfigError);
  CHECK_THROWS_AS(Model({{"conv", 2}}, 4, 2, 0), ConfigError);
  CHECK_THROWS_AS(Model({{"dense", 2}}, 0, 2, 0), ConfigError);
  CHECK_THROWS_AS(Model({{"dense", 2}}, 4, 0, 0), ConfigError);
  CHECK_THROWS_AS(Model({{"dense", 2}}, Shape{2, 0, 3}, 1, 0), ConfigError);
  // A layer's error names the key, the index, the spec and what was expected.
  CHECK_THROWS_WITH(Model({{"dense", 2}, {"conv", 2}}, 4, 2, 0),
                    Catch::StartsWith("model.layers[1] 'conv': expected one of dense"));
}

TEST_CASE("Model chains shapes from the input shape, a dense layer reads any shape flat",
          "[tasks][model]") {
  const auto specs = parse_layer_specs({"dense:8", "relu", "dense:3", "softmax_cross_entropy"});
  Model image(specs, Shape{2, 3, 4}, 5, 11);
  Model flat(specs, 24, 5, 11);
  CHECK(image.input_shape() == Shape{2, 3, 4});
  CHECK(image.input_size() == 24);
  CHECK(flat.input_shape() == Shape::flat(24));
  CHECK(image.layer(0).input_shape() == Shape{2, 3, 4});
  CHECK(image.layer(0).output_shape() == Shape::flat(8));
  CHECK(image.layer(1).input_shape() == Shape::flat(8));
  CHECK(image.layer(2).output_shape() == Shape::flat(3));
  // NCHW is row-major: the same floats in, the same parameters, the same numbers out.
  REQUIRE(image.parameter_count() == flat.parameter_count());
  CHECK(
      std::equal(image.parameters().begin(), image.parameters().end(), flat.parameters().begin()));
  const auto x = testing::random_floats(5 * 24, 61);
  const std::vector<std::int32_t> y = {0, 1, 2, 1, 0};
  CHECK(image.forward_backward(x, y) == flat.forward_backward(x, y));
  CHECK(std::equal(image.gradients().begin(), image.gradients().end(), flat.gradients().begin()));
}

TEST_CASE("Model wants flat logits before the loss", "[tasks][model]") {
  // A dense layer's output is flat whatever its input.
  CHECK_NOTHROW(
      Model(parse_layer_specs({"dense:4", "softmax_cross_entropy"}), Shape{1, 2, 2}, 1, 0));
  CHECK_THROWS_WITH(Model({{"relu"}, {"softmax_cross_entropy"}}, Shape{1, 2, 2}, 1, 0),
                    Catch::StartsWith("model.layers[1] 'softmax_cross_entropy': expected flat "
                                      "logits (classes x 1 x 1) from the layer before, got 1x2x2"));
}

TEST_CASE("Model evaluates in evaluation mode and restores the mode", "[tasks][model]") {
  Model m(parse_layer_specs({"dense:3", "softmax_cross_entropy"}), 2, 4, 1);
  CHECK(m.training());
  const Dataset d{2, 2, 3, {1, 0, 0, 1}, {0, 1}};
  (void)m.evaluate(d);
  CHECK(m.training());
  m.set_training(false);
  (void)m.evaluate(d);
  CHECK_FALSE(m.training());
}

TEST_CASE("Model gradients match finite differences", "[tasks][model]") {
  constexpr std::size_t kIn = 5, kBatch = 3;
  const auto specs = parse_layer_specs({"dense:6", "relu", "dense:4", "softmax_cross_entropy"});
  Model m(specs, kIn, kBatch, 7);
  // Larger biases than the zero init, so no ReLU input sits near the kink at 0.
  for (float& b : m.layer_parameters(0).last(6)) b = 0.3f;
  const auto x = testing::random_floats(kIn * kBatch, 41);
  const std::vector<std::int32_t> y = {0, 3, 1};
  m.forward_backward(x, y);
  const std::vector<float> analytic(m.gradients().begin(), m.gradients().end());

  SplitMix64 pick(5);
  auto params = m.parameters();
  for (int trial = 0; trial < 24; ++trial) {
    const auto i = static_cast<std::size_t>(pick.next_below(params.size()));
    const double numeric = testing::central_difference(
        params[i], [&] { return static_cast<double>(m.forward_backward(x, y)); });
    INFO("parameter " << i << " analytic " << analytic[i] << " numeric " << numeric);
    CHECK(testing::gradients_agree(analytic[i], numeric));
  }
}

TEST_CASE("Model layer-by-layer steps equal forward_backward", "[tasks][model]") {
  const auto specs = parse_layer_specs({"dense:6", "relu", "dense:4", "softmax_cross_entropy"});
  Model a(specs, 5, 4, 9), b(specs, 5, 4, 9);
  const auto x = testing::random_floats(5 * 3, 51);
  const std::vector<std::int32_t> y = {1, 2, 3};
  const float la = a.forward_backward(x, y);

  auto in = b.input(3);
  std::copy(x.begin(), x.end(), in.begin());
  for (std::size_t l = 0; l < b.num_layers(); ++l) b.forward_layer(l, 3);
  CHECK(b.output(3).size() == 3 * 4);
  const float lb = b.loss_backward(y);
  for (std::size_t l = b.num_layers(); l-- > 0;) b.backward_layer(l, 3);
  CHECK(la == lb);
  CHECK(std::equal(a.gradients().begin(), a.gradients().end(), b.gradients().begin()));
  CHECK_THROWS_AS(b.input(5), ContractError);
}

TEST_CASE("Model evaluate counts accuracy over partial batches", "[tasks][model]") {
  const auto specs = parse_layer_specs({"dense:3", "softmax_cross_entropy"});
  Model m(specs, 2, 4, 1);
  // Make the model the identity-ish classifier: class c scores feature-based logits.
  auto p = m.parameters();
  std::fill(p.begin(), p.end(), 0.0f);
  p[0 * 2 + 0] = 1.0f;  // class 0 <- x0
  p[1 * 2 + 1] = 1.0f;  // class 1 <- x1
  p[6 + 2] = 0.5f;      // class 2 bias
  Dataset d{5, 2, 3, {2, 0, 0, 2, 0, 0, 2, 0, 0, 2}, {0, 1, 2, 0, 2}};
  const auto e = m.evaluate(d);
  CHECK(e.accuracy == Approx(4.0 / 5.0));  // example 4 (x = (0, 2), label 2) predicts 1
  CHECK(e.loss > 0.0);
  d.classes = 10;
  CHECK_THROWS_AS(m.evaluate(d), ConfigError);
  // Fewer classes than outputs: evaluated over all the outputs, as in training.
  const Dataset two{2, 2, 2, {2, 0, 0, 2}, {0, 1}};
  CHECK(m.evaluate(two).accuracy == 1.0);
}

}  // namespace gradmesh::tasks

namespace gradmesh::tasks {

TEST_CASE("Model builds the Fashion-MNIST CNN: shapes, layout and 3.27M parameters",
          "[tasks][model][cnn]") {
  const auto specs = parse_layer_specs({"conv2d:32:5:1:2", "relu", "max_pool2d:2",
                                        "conv2d:64:5:1:2", "relu", "max_pool2d:2", "flatten",
                                        "dense:1024", "relu", "dense:10", "softmax_cross_entropy"});
  Model m(specs, Shape{1, 28, 28}, 2, 42);
  REQUIRE(m.num_layers() == 10);
  CHECK(m.layer(0).output_shape() == Shape{32, 28, 28});
  CHECK(m.layer(2).output_shape() == Shape{32, 14, 14});
  CHECK(m.layer(3).output_shape() == Shape{64, 14, 14});
  CHECK(m.layer(5).output_shape() == Shape{64, 7, 7});
  CHECK(m.layer(6).output_shape() == Shape::flat(3136));
  CHECK(m.layer(7).output_shape() == Shape::flat(1024));
  CHECK(m.output_size() == 10);
  const std::size_t conv1 = 32 * 1 * 5 * 5 + 32, conv2 = 64 * 32 * 5 * 5 + 64;
  const std::size_t fc1 = 3136 * 1024 + 1024, fc2 = 1024 * 10 + 10;
  CHECK(m.parameter_count() == conv1 + conv2 + fc1 + fc2);
  CHECK(m.parameter_count() == 3274634);
  CHECK(m.parameter_offset(3) == conv1);
  CHECK(m.layer_parameters(3).size() == conv2);
  CHECK_FALSE(m.layer(0).has_sufficient_factors());
  CHECK(m.layer(7).has_sufficient_factors());
}

TEST_CASE("Model names the layer, its spec and what was expected when shapes do not fit",
          "[tasks][model][cnn]") {
  CHECK_THROWS_WITH(
      Model(parse_layer_specs({"conv2d:8:5", "dense:10", "softmax_cross_entropy"}), Shape{1, 4, 4},
            1, 0),
      "model.layers[0] 'conv2d:8:5:1:0': conv2d: expected a kernel no larger than the padded "
      "input 4x4 (input 1x4x4, padding 0), got 5x5");
  CHECK_THROWS_WITH(
      Model(parse_layer_specs({"max_pool2d:2", "max_pool2d:2", "max_pool2d:2", "dense:3",
                               "softmax_cross_entropy"}),
            Shape{1, 5, 5}, 1, 0),
      Catch::StartsWith("model.layers[2] 'max_pool2d:2:2': max_pool2d: expected a window no "
                        "larger than the input's 1x1"));
  // A convolution on flat features sees a C x 1 x 1 input: only a 1 x 1 kernel (or padding) fits.
  CHECK_THROWS_WITH(
      Model(parse_layer_specs({"dense:16", "conv2d:4:3", "dense:2", "softmax_cross_entropy"}),
            Shape{1, 8, 8}, 1, 0),
      Catch::StartsWith("model.layers[1] 'conv2d:4:3:1:0'"));
  // 2 x 1 x 1 logits are flat: fine.
  CHECK_NOTHROW(Model(parse_layer_specs({"dense:4", "conv2d:2:1", "softmax_cross_entropy"}),
                      Shape{1, 8, 8}, 1, 0));
}

TEST_CASE("Model gradients of a small CNN match finite differences", "[tasks][model][cnn]") {
  const auto specs =
      parse_layer_specs({"conv2d:3:3:1:1", "relu", "max_pool2d:2", "conv2d:2:2:2:0", "flatten",
                         "dropout:0.3", "dense:4", "softmax_cross_entropy"});
  constexpr std::size_t kBatch = 2;
  Model m(specs, Shape{2, 6, 6}, kBatch, 13);
  for (float& b : m.layer_parameters(0).last(3)) b = 0.2f;  // keep most relu inputs off the kink
  auto& dropout = dynamic_cast<Dropout&>(m.layer(5));
  const auto x = testing::random_floats(kBatch * 72, 71);
  const std::vector<std::int32_t> y = {1, 3};
  const auto loss = [&] {
    dropout.set_step(0);  // one fixed mask for every evaluation of the loss
    return static_cast<double>(m.forward_backward(x, y));
  };
  loss();
  const std::vector<float> analytic(m.gradients().begin(), m.gradients().end());
  auto params = m.parameters();
  std::size_t kinks = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto numeric = testing::smooth_central_difference(params[i], loss);
    if (!numeric) {
      ++kinks;  // a relu or max-pool switch within the step: no difference to compare with
      continue;
    }
    INFO("parameter " << i << " analytic " << analytic[i] << " numeric " << *numeric);
    CHECK(testing::gradients_agree(analytic[i], *numeric));
  }
  CHECK(kinks <= params.size() / 10);
}

TEST_CASE("Model predict gives the logits evaluate scores, in any count of samples",
          "[tasks][model]") {
  // Batches of at most 2: 5 samples take three forward passes; dropout is off while predicting.
  const auto specs =
      parse_layer_specs({"dropout:0.5", "dense:4", "relu", "dense:3", "softmax_cross_entropy"});
  Model m(specs, 2, 2, 7);
  const std::vector<float> x = {1, 0, 0, 1, 0.5f, 0.5f, -1, 2, 3, -2};
  std::vector<float> logits(5 * 3);
  m.predict(x, logits);
  CHECK(m.training());                                    // restored
  CHECK(dynamic_cast<Dropout&>(m.layer(0)).step() == 0);  // no mask drawn
  // Each sample alone gives its row: with OpenBLAS (builtin) the batching does not change a
  // logit's bits; oneDNN's sgemm takes another kernel for a single row, which may round the
  // last bits otherwise (seen: 1 ulp).
  for (std::size_t k = 0; k < 5; ++k) {
    INFO("sample " << k);
    std::vector<float> one(3);
    m.predict(std::span<const float>(x).subspan(2 * k, 2), one);
    const auto row = logits.begin() + static_cast<std::ptrdiff_t>(3 * k);
    if (cpu::kernels() == cpu::CpuKernels::kBuiltin) {
      CHECK(std::equal(one.begin(), one.end(), row));
    } else {
      for (std::size_t j = 0; j < 3; ++j) CHECK(one[j] == Approx(row[j]).epsilon(1e-6));
    }
  }
  // evaluate's accuracy is the share of rows whose argmax is the label.
  const std::vector<std::int32_t> labels = {0, 1, 2, 0, 1};
  std::size_t right = 0;
  for (std::size_t k = 0; k < 5; ++k) {
    const auto row = logits.begin() + static_cast<std::ptrdiff_t>(3 * k);
    right += std::max_element(row, row + 3) - row == labels[k] ? 1 : 0;
  }
  const Dataset d{5, 2, 3, x, labels};
  CHECK(m.evaluate(d).accuracy == Approx(static_cast<double>(right) / 5));
  // Nothing in, nothing out; sizes that do not fit are refused.
  m.predict({}, {});
  std::vector<float> wrong(14);
  CHECK_THROWS_AS(m.predict(x, wrong), ContractError);
  CHECK_THROWS_AS(m.predict(std::span<const float>(x).first(3), logits), ContractError);
}

TEST_CASE("Model evaluate switches dropout off", "[tasks][model][cnn]") {
  const auto specs = parse_layer_specs({"dropout:0.5", "dense:3", "softmax_cross_entropy"});
  Model m(specs, 4, 2, 3);
  const Dataset d{2, 4, 3, {1, 2, 3, 4, 4, 3, 2, 1}, {0, 2}};
  const auto a = m.evaluate(d), b = m.evaluate(d);
  CHECK(a.loss == b.loss);  // no mask drawn: the same numbers every time
  CHECK(dynamic_cast<Dropout&>(m.layer(0)).step() == 0);
  CHECK(m.training());
}

}  // namespace gradmesh::tasks

namespace gradmesh::tasks {

TEST_CASE("Model checkpoint: parameters and dropout's random stream resume bitwise",
          "[tasks][model][checkpoint]") {
  const auto specs =
      parse_layer_specs({"dense:16", "relu", "dropout:0.5", "dense:10", "softmax_cross_entropy"});
  Model a(specs, 784, 4, 3);
  std::vector<float> x(4 * 784);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) / 13.0f;
  const std::vector<std::int32_t> y{1, 2, 3, 4};
  (void)a.forward_backward(x, y);
  for (float& p : a.parameters()) p *= 0.99f;  // a replica that moved since initialisation
  engine::StateWriter out;
  a.save_state(out);

  Model b(specs, 784, 4, 3);  // a fresh process of the same job: initial weights, mask 0 next
  engine::StateReader in(out.bytes(), "test");
  b.load_state(in);
  in.expect_end();
  CHECK(std::equal(a.parameters().begin(), a.parameters().end(), b.parameters().begin()));
  // The next step draws the same dropout mask (the second), so the gradients agree bitwise.
  const float la = a.forward_backward(x, y), lb = b.forward_backward(x, y);
  CHECK(la == lb);
  CHECK(std::memcmp(a.gradients().data(), b.gradients().data(),
                    a.gradients().size() * sizeof(float)) == 0);

  Model other(parse_layer_specs({"dense:8", "softmax_cross_entropy"}), 784, 4, 3);
  engine::StateReader wrong(out.bytes(), "ckpt, section 'model'");
  CHECK_THROWS_WITH(other.load_state(wrong), Catch::Contains("section 'model'"));
}

}  // namespace gradmesh::tasks

TEST_CASE("a shapes-only model has the model's graph and parameters and computes nothing",
          "[tasks][model]") {
  // A CNN with a residual join (branches: the constructor's delta scratch) and a batch norm.
  const auto specs = gradmesh::tasks::parse_layer_specs(
      {"stem = conv2d:8:3:1:1", "batch_norm", "relu", "conv2d:8:3:1:1", "b = batch_norm",
       "add <- b stem", "relu", "max_pool2d:2", "flatten", "dense:10", "softmax_cross_entropy"});
  const gradmesh::tasks::Shape input{1, 8, 8};
  gradmesh::tasks::Model full(specs, input, 4, 7);
  gradmesh::tasks::Model shapes = gradmesh::tasks::Model::shapes_only(specs, input, 4, 7);
  CHECK(shapes.is_shapes_only());
  CHECK(!full.is_shapes_only());
  REQUIRE(shapes.num_layers() == full.num_layers());
  for (std::size_t l = 0; l < full.num_layers(); ++l) {
    CHECK(shapes.layer_name(l) == full.layer_name(l));
    CHECK(shapes.layer(l).output_shape().size() == full.layer(l).output_shape().size());
    CHECK(shapes.layer(l).parameter_count() == full.layer(l).parameter_count());
  }
  // The same initial parameters, bit for bit.
  const auto a = full.parameters(), b = shapes.parameters();
  CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  CHECK_THROWS_AS(shapes.input(4), gradmesh::ContractError);
  CHECK_THROWS_AS(shapes.forward_layer(0, 4), gradmesh::ContractError);
  CHECK_THROWS_AS(shapes.backward_layer(0, 4), gradmesh::ContractError);
  CHECK_THROWS_AS(shapes.loss_backward({}), gradmesh::ContractError);
  CHECK_THROWS_WITH(shapes.output(4), Catch::Contains("shapes-only model"));
}
