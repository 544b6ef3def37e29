// Tests for model graphs (tasks/model.h, issue 29 item 1): entries that name their inputs, add and
// concat, basic_block, the order of layers and gradients, finite-difference checks of a graph
// with branches and of residual blocks, the device path, and the errors of a bad graph.

#include <algorithm>
#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/error.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/layers/merge.h"
#include "tasks/model.h"
#include "tasks/profile.h"
#include "tests/tasks/emulated_device.h"
#include "tests/tasks/gradient_check.h"

namespace gradmesh::tasks {
namespace {

/// A graph of every joint: `a` feeds three layers (fan-out), an add and a concat join branches.
/// Input 2x5x5.
std::vector<std::string> branching_graph() {
  return {"a = conv2d:3:3:1:1",
          "relu",
          "b = conv2d:3:3:1:1",
          "c = conv2d:2:1:1:0 <- a",
          "s = add <- b a",
          "k = concat <- s c",
          "flatten",
          "dense:4",
          "softmax_cross_entropy"};
}

/// Finite differences of the mean loss against the analytic gradient at `trials` parameters
/// picked from `seed` (all of them when trials >= the count).
void check_gradients(Model& m, const std::vector<float>& x, const std::vector<std::int32_t>& y,
                     int trials, std::uint64_t seed) {
  m.forward_backward(x, y);
  const std::vector<float> analytic(m.gradients().begin(), m.gradients().end());
  SplitMix64 pick(seed);
  auto params = m.parameters();
  for (int trial = 0; trial < trials; ++trial) {
    const auto i = static_cast<std::size_t>(pick.next_below(params.size()));
    const double numeric = testing::central_difference(
        params[i], [&] { return static_cast<double>(m.forward_backward(x, y)); });
    INFO("parameter " << i << " analytic " << analytic[i] << " numeric " << numeric);
    CHECK(testing::gradients_agree(analytic[i], numeric));
  }
}

/// check_gradients() for a graph deep in batch norms and ReLUs: a parameter whose loss has a
/// kink within eps (one-sided differences that disagree: a ReLU input crossing 0) is skipped;
/// every other must agree, and at least `min_checked` of the `trials` must be smooth.
void check_smooth_gradients(Model& m, const std::vector<float>& x,
                            const std::vector<std::int32_t>& y, int trials, std::uint64_t seed,
                            int min_checked) {
  m.forward_backward(x, y);
  const std::vector<float> analytic(m.gradients().begin(), m.gradients().end());
  SplitMix64 pick(seed);
  auto params = m.parameters();
  int checked = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const auto i = static_cast<std::size_t>(pick.next_below(params.size()));
    const std::optional<double> numeric = testing::smooth_central_difference(
        params[i], [&] { return static_cast<double>(m.forward_backward(x, y)); });
    if (!numeric) continue;
    ++checked;
    INFO("parameter " << i << " analytic " << analytic[i] << " numeric " << *numeric);
    CHECK(testing::gradients_agree(analytic[i], *numeric));
  }
  CHECK(checked >= min_checked);
}

std::string construction_error(const std::vector<std::string>& texts, Shape input) {
  try {
    Model m(parse_layer_specs(texts), input, 2, 1);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("A graph entry parses its name and inputs and prints them back", "[tasks][graph]") {
  const LayerSpec s = parse_layer_spec(" sum = add <- b, a ");
  CHECK(s.kind == "add");
  CHECK(s.name == "sum");
  CHECK(s.inputs == std::vector<std::string>{"b", "a"});
  CHECK(to_string(s) == "sum = add <- b a");
  CHECK(parse_layer_spec(to_string(s)) == s);
  const LayerSpec block = parse_layer_spec("stage2 = basic_block:32:2");
  CHECK(block.units == 32);
  CHECK(block.stride == 2);
  CHECK(to_string(parse_layer_spec("basic_block:16")) == "basic_block:16:1");
  CHECK(parse_layer_spec("conv2d:8:3 <- input").inputs == std::vector<std::string>{"input"});
  CHECK_THROWS_WITH(parse_layer_spec("add <-"), Catch::Contains("'<-' names no input"));
  CHECK_THROWS_WITH(parse_layer_spec("2x = relu"), Catch::Contains("name '2x'"));
  CHECK_THROWS_WITH(parse_layer_spec("input = relu"), Catch::Contains("the model's input"));
  CHECK_THROWS_WITH(parse_layer_spec("relu <- a+b"), Catch::Contains("input 'a+b' is no name"));
}

TEST_CASE("A graph's layers run in list order, its gradients from the last layer back",
          "[tasks][graph]") {
  Model m(parse_layer_specs(branching_graph()), Shape{2, 5, 5}, 3, 11);
  REQUIRE(m.num_layers() == 8);
  const char* kinds[] = {"conv2d", "relu", "conv2d", "conv2d", "add", "concat", "flatten", "dense"};
  for (std::size_t l = 0; l < 8; ++l) CHECK(m.layer(l).kind() == kinds[l]);
  CHECK(m.layer(4).output_shape() == Shape{3, 5, 5});
  CHECK(m.layer(5).output_shape() == Shape{5, 5, 5});
  CHECK(m.layer(5).input_count() == 2);
  // Layer by layer (the sync stage's tasks: forward 0 .. L-1, backward L-1 .. 0) equals the
  // whole pass, bit for bit; the parameters are in list order.
  Model whole(parse_layer_specs(branching_graph()), Shape{2, 5, 5}, 3, 11);
  const auto x = testing::random_floats(3 * 50, 3);
  const std::vector<std::int32_t> y = {0, 3, 1};
  const float loss = whole.forward_backward(x, y);
  auto in = m.input(3);
  std::copy(x.begin(), x.end(), in.begin());
  for (std::size_t l = 0; l < m.num_layers(); ++l) m.forward_layer(l, 3);
  CHECK(m.loss_backward(y) == loss);
  for (std::size_t l = m.num_layers(); l-- > 0;) m.backward_layer(l, 3);
  CHECK(std::equal(m.gradients().begin(), m.gradients().end(), whole.gradients().begin()));
  CHECK(m.parameter_offset(3) - m.parameter_offset(2) == 3 * 3 * 3 * 3 + 3);
  // The layer input SFB reads is the layer's own input (c takes a, not the layer before it).
  CHECK(m.layer_input(3, 3).size() == 3 * 3 * 25);
  CHECK(std::equal(m.layer_input(3, 3).begin(), m.layer_input(3, 3).end(),
                   m.layer_input(1, 3).begin()));
}

TEST_CASE("Gradients of a graph with fan-out, add and concat match finite differences",
          "[tasks][graph]") {
  Model m(parse_layer_specs(branching_graph()), Shape{2, 5, 5}, 3, 21);
  const auto x = testing::random_floats(3 * 50, 8);
  const std::vector<std::int32_t> y = {2, 0, 1};
  check_gradients(m, x, y, 60, 4);
}

TEST_CASE("Residual blocks expand as He et al.'s and their gradients match finite differences",
          "[tasks][graph]") {
  // Identity shortcut (same channels, stride 1), then a projection (channels and stride change).
  const std::vector<std::string> texts = {"conv2d:4:3:1:1",  "b1 = basic_block:4",
                                          "basic_block:6:2", "global_avg_pool",
                                          "dense:3",         "softmax_cross_entropy"};
  Model m(parse_layer_specs(texts), Shape{2, 6, 6}, 4, 31);
  std::vector<std::string> kinds;
  for (std::size_t l = 0; l < m.num_layers(); ++l) kinds.emplace_back(m.layer(l).kind());
  const std::vector<std::string> expected = {
      "conv2d",     "conv2d", "batch_norm", "relu",       "conv2d", "batch_norm",
      "add",        "relu",   "conv2d",     "batch_norm", "relu",   "conv2d",
      "batch_norm", "conv2d", "batch_norm", "add",        "relu",   "global_avg_pool",
      "dense"};
  CHECK(kinds == expected);
  CHECK(m.layer(13).output_shape() == Shape{6, 3, 3});  // the 1x1 projection with stride 2
  const auto x = testing::random_floats(4 * 72, 9);
  const std::vector<std::int32_t> y = {2, 0, 1, 1};
  // Each kernel set, with its fusions (issue 55): the ReLUs after an add run inside the add on
  // both, those after a batch norm inside it on oneDNN only.
  for (const cpu::CpuKernels kernels : testing::kernel_sets()) {
    INFO(cpu::to_string(kernels));
    const testing::ScopedKernels use(kernels);
    Model fused(parse_layer_specs(texts), Shape{2, 6, 6}, 4, 31);
    const bool onednn = kernels == cpu::CpuKernels::kOnednn;
    for (std::size_t l = 0; l < fused.num_layers(); ++l) {
      INFO("layer " << l << " " << kinds[l]);
      const bool after_add = kinds[l] == "relu" && kinds[l - 1] == "add";
      const bool after_norm = kinds[l] == "relu" && kinds[l - 1] == "batch_norm";
      CHECK(fused.fused(l) == (after_add || (after_norm && onednn)));
    }
    check_gradients(fused, x, y, 80, 6);
  }
}

TEST_CASE("Bottleneck blocks expand as ResNet-50's and their gradients match finite differences",
          "[tasks][graph]") {
  // He et al., fig. 5 right: 1x1, 3x3 (the stride), 1x1 to 4 x the width; a projection where the
  // channels or the size change (the first block of a stage), none where they do not.
  CHECK(to_string(parse_layer_spec("bottleneck_block:16")) == "bottleneck_block:16:1");
  CHECK_THROWS_WITH(parse_layer_spec("bottleneck_block:0"),
                    Catch::Contains("'bottleneck_block:<channels>[:<stride>]'"));
  const std::vector<std::string> texts = {"conv2d:8:3:1:1",       "b = bottleneck_block:2",
                                          "bottleneck_block:2",   "bottleneck_block:3:2",
                                          "global_avg_pool",      "dense:3",
                                          "softmax_cross_entropy"};
  Model m(parse_layer_specs(texts), Shape{2, 6, 6}, 4, 41);
  std::vector<std::string> kinds;
  for (std::size_t l = 0; l < m.num_layers(); ++l) kinds.emplace_back(m.layer(l).kind());
  const std::vector<std::string> identity = {"conv2d",     "batch_norm", "relu",   "conv2d",
                                             "batch_norm", "relu",       "conv2d", "batch_norm",
                                             "add",        "relu"};
  std::vector<std::string> projection = identity;
  projection.insert(projection.begin() + 8, {"conv2d", "batch_norm"});
  std::vector<std::string> expected = {"conv2d"};
  expected.insert(expected.end(), identity.begin(), identity.end());  // 8 channels in, 8 out
  expected.insert(expected.end(), identity.begin(), identity.end());
  expected.insert(expected.end(), projection.begin(), projection.end());  // 12 out, stride 2
  expected.insert(expected.end(), {"global_avg_pool", "dense"});
  CHECK(kinds == expected);
  CHECK(m.layer(1).output_shape() == Shape{2, 6, 6});    // b.conv1: 1x1 to the width
  CHECK(m.layer(7).output_shape() == Shape{8, 6, 6});    // b.conv3: 1x1 to 4 x the width
  CHECK(m.layer(24).output_shape() == Shape{3, 3, 3});   // the 3x3 with the stride
  CHECK(m.layer(27).output_shape() == Shape{12, 3, 3});  // the 1x1 projection with the stride
  // Parameters of the first block: 1x1 8->2, 3x3 2->2, 1x1 2->8 with biases; three batch norms.
  CHECK(m.parameter_offset(11) - m.parameter_offset(1) ==
        (8 * 2 + 2) + (2 * 2 * 9 + 2) + (2 * 8 + 8) + 2 * (2 + 2 + 8));
  // Three blocks of narrow batch norms and ReLUs put a kink within eps of about a third of the
  // parameters (25 of 80 here): those are skipped, every other agrees.
  const auto x = testing::random_floats(4 * 72, 12);
  const std::vector<std::int32_t> y = {2, 0, 1, 1};
  for (const cpu::CpuKernels kernels : testing::kernel_sets()) {
    INFO(cpu::to_string(kernels));
    const testing::ScopedKernels use(kernels);
    Model fresh(parse_layer_specs(texts), Shape{2, 6, 6}, 4, 41);
    check_smooth_gradients(fresh, x, y, 80, 6, 40);
  }
}

TEST_CASE("A ReLU is fused only into the one layer whose output only it takes", "[tasks][graph]") {
  // relu0 takes the input (no layer gives it); relu2 takes an add's output that relu3 takes too;
  // relu4 takes a ReLU's; relu6 an add's output that only it takes.
  const std::vector<std::string> graph = {"r0 = relu",
                                          "a = conv2d:2:3:1:1",
                                          "s = add <- a r0",
                                          "r1 = relu <- s",
                                          "r2 = relu <- s",
                                          "r3 = relu <- r2",
                                          "t = add <- r1 r3",
                                          "relu",
                                          "flatten",
                                          "dense:2",
                                          "softmax_cross_entropy"};
  Model m(parse_layer_specs(graph), Shape{2, 4, 4}, 3, 5);
  REQUIRE(m.num_layers() == 10);
  for (std::size_t l = 0; l < m.num_layers(); ++l) {
    INFO("layer " << l << " " << m.layer(l).kind());
    CHECK(m.fused(l) == (l == 7));  // only the ReLU after t
  }
  CHECK(m.layer(6).relu_fused());
  CHECK_FALSE(m.layer(2).relu_fused());
  CHECK_THROWS_AS(m.fused(10), ContractError);
  const auto x = testing::random_floats(3 * 32, 4);
  const std::vector<std::int32_t> y = {1, 0, 1};
  check_gradients(m, x, y, 40, 8);
}

TEST_CASE("A graph on a device computes what it computes on the host", "[tasks][graph]") {
  Model host(parse_layer_specs(branching_graph()), Shape{2, 5, 5}, 3, 41);
  Model device(parse_layer_specs(branching_graph()), Shape{2, 5, 5}, 3, 41,
               std::make_unique<testing::EmulatedDevice>());
  REQUIRE(device.on_device());
  const auto x = testing::random_floats(3 * 50, 12);
  const std::vector<std::int32_t> y = {1, 1, 0};
  CHECK(device.forward_backward(x, y) == host.forward_backward(x, y));
  CHECK(std::equal(device.gradients().begin(), device.gradients().end(), host.gradients().begin()));
}

TEST_CASE("A bad graph is refused naming the entry and what was expected", "[tasks][graph]") {
  const Shape in{2, 5, 5};
  CHECK_THAT(construction_error(
                 {"conv2d:3:3 <- nowhere", "flatten", "dense:2", "softmax_cross_entropy"}, in),
             Catch::Contains("model.layers[0] 'conv2d:3:3:1:0 <- nowhere': unknown input "
                             "'nowhere' (expected one of input)"));
  // A cycle cannot be listed: its first edge points forward.
  CHECK_THAT(construction_error({"a = conv2d:2:3:1:1 <- b", "b = relu <- a", "flatten", "dense:2",
                                 "softmax_cross_entropy"},
                                in),
             Catch::Contains("its input 'b' is model.layers[1], later: every input must be an "
                             "earlier entry"));
  CHECK_THAT(construction_error(
                 {"a = relu", "a = relu", "flatten", "dense:2", "softmax_cross_entropy"}, in),
             Catch::Contains("model.layers[1] 'a = relu': the name 'a' is taken"));
  CHECK_THAT(construction_error({"a = conv2d:3:3:1:1", "b = conv2d:3:3:1:0", "add <- a b",
                                 "flatten", "dense:2", "softmax_cross_entropy"},
                                in),
             Catch::Contains("model.layers[2] 'add <- a b': add: expected inputs of one shape, "
                             "got 3x5x5 and 3x3x3"));
  CHECK_THAT(construction_error({"a = conv2d:3:3:1:1", "b = conv2d:3:3:1:1", "flatten <- a",
                                 "dense:2", "softmax_cross_entropy"},
                                in),
             Catch::Contains("model.layers[1] 'b = conv2d:3:3:1:1': its output goes nowhere"));
  CHECK_THAT(
      construction_error(
          {"a = conv2d:3:3:1:1", "add <- a", "flatten", "dense:2", "softmax_cross_entropy"}, in),
      Catch::Contains("add: expected two or more inputs"));
  CHECK_THAT(construction_error(
                 {"relu <- input input", "flatten", "dense:2", "softmax_cross_entropy"}, in),
             Catch::Contains("relu: takes one input, got 2"));
  CHECK_THAT(construction_error(
                 {"x = flatten", "dense:2 <- x", "dense:2 <- x", "softmax_cross_entropy"}, in),
             Catch::Contains("model.layers[1] 'dense:2 <- x': its output goes nowhere"));
}

}  // namespace gradmesh::tasks

namespace gradmesh::tasks {

TEST_CASE("Profiling a graph leaves its next pass as a fresh model's", "[tasks][graph]") {
  // profile_layers runs each backward twice (the second for the input gradient alone); the next
  // loss_backward starts a new pass, so training after it is untouched.
  Model profiled(parse_layer_specs(branching_graph()), Shape{2, 5, 5}, 3, 51);
  Model fresh(parse_layer_specs(branching_graph()), Shape{2, 5, 5}, 3, 51);
  const LayerTimes times = profile_layers(profiled, 3, 2, 7);
  CHECK(times.backward_seconds.size() == profiled.num_layers());
  const auto x = testing::random_floats(3 * 50, 13);
  const std::vector<std::int32_t> y = {3, 2, 1};
  CHECK(profiled.forward_backward(x, y) == fresh.forward_backward(x, y));
  CHECK(std::equal(profiled.gradients().begin(), profiled.gradients().end(),
                   fresh.gradients().begin()));
}

}  // namespace gradmesh::tasks

namespace gradmesh::tasks {

TEST_CASE("The ranges exempt from weight decay are biases and batch normalization's",
          "[tasks][model]") {
  // conv2d:3 on 2 channels: W 54, b 3; batch_norm: gamma, beta 6; dense:4 on 3*4*4: W 192, b 4.
  Model m(parse_layer_specs(
              {"conv2d:3:3:1:1", "batch_norm", "relu", "dense:4", "softmax_cross_entropy"}),
          Shape{2, 4, 4}, 2, 1);
  using Ranges = std::vector<std::pair<std::size_t, std::size_t>>;
  // The conv's bias and the batch norm's parameters are adjacent: one range.
  CHECK(m.weight_decay_exempt() == Ranges{{54, 9}, {63 + 192, 4}});
  CHECK(m.parameter_count() == 63 + 196);
}

}  // namespace gradmesh::tasks
