// Tests for tasks/layers/batch_norm.h: batch normalization's statistics (1-d and 2-d), its
// running statistics and evaluation mode, finite-difference checks, and its state in checkpoints.

#include "tasks/layers/batch_norm.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/layers/make_layer.h"
#include "tasks/model.h"
#include "tasks/profile.h"
#include "tasks/random.h"
#include "tests/tasks/emulated_device.h"
#include "tests/tasks/gradient_check.h"
#include "tests/tasks/thread_exchange.h"

namespace gradmesh::tasks {

namespace {

/// A batch_norm layer of `input`, bound to `params` and `grads`, reserved and initialized.
struct Bound {
  BatchNorm layer;
  std::vector<float> params, grads;
  explicit Bound(Shape input)
      : layer(input), params(layer.parameter_count()), grads(layer.parameter_count()) {
    layer.bind(params, grads);
    layer.reserve(8);
    layer.initialize(1);
  }
  /// Writes `values` into the bound parameters (their storage stays where the layer points).
  void set_params(const std::vector<float>& values) {
    std::copy(values.begin(), values.end(), params.begin());
  }
  [[nodiscard]] std::vector<float> running() {
    std::vector<float> out(layer.state_size());
    layer.save_layer_state(out);
    return out;
  }
};

}  // namespace

TEST_CASE("batch_norm 1-d: each feature over the batch, and the running statistics",
          "[tasks][batch_norm]") {
  Bound b(Shape::flat(2));
  CHECK(b.layer.kind() == "batch_norm");
  CHECK(b.layer.parameter_count() == 4);
  CHECK(b.params == std::vector<float>{1, 1, 0, 0});     // gamma 1, beta 0
  CHECK(b.running() == std::vector<float>{0, 0, 1, 1});  // mean 0, variance 1
  // Feature 0: 1, 2, 3, 4 (mean 2.5, variance 1.25); feature 1: 10, 10, 10, 10 (variance 0).
  const std::vector<float> x = {1, 10, 2, 10, 3, 10, 4, 10};
  std::vector<float> y(8);
  b.layer.forward(x.data(), y.data(), 4);
  const float inv_std = 1.0f / std::sqrt(1.25f + BatchNorm::kEpsilon);
  for (std::size_t k = 0; k < 4; ++k) {
    INFO("sample " << k);
    CHECK(y[2 * k] == Approx((static_cast<float>(k) + 1 - 2.5f) * inv_std));
    CHECK(y[2 * k + 1] == 0.0f);
  }
  // r_mu = 0.9 * 0 + 0.1 * mu; r_var = 0.9 * 1 + 0.1 * (4/3) var (unbiased).
  const std::vector<float> running = b.running();
  CHECK(running[0] == Approx(0.25));
  CHECK(running[1] == Approx(1.0));
  CHECK(running[2] == Approx(0.9 + 0.1 * 1.25 * 4 / 3));
  CHECK(running[3] == Approx(0.9));
  // gamma and beta scale and shift.
  b.set_params({2, 1, 0.5f, -1});
  b.layer.forward(x.data(), y.data(), 4);
  CHECK(y[0] == Approx(2 * (1 - 2.5f) * inv_std + 0.5f));
  CHECK(y[1] == Approx(-1));
}

TEST_CASE("batch_norm 2-d: each channel over the batch and its positions", "[tasks][batch_norm]") {
  Bound b(Shape{2, 1, 2});
  // Channel 0 takes 1, 2 (sample 0) and 3, 6 (sample 1): mean 3, variance 3.5; channel 1 all 5.
  const std::vector<float> x = {1, 2, 5, 5, 3, 6, 5, 5};
  std::vector<float> y(8);
  b.layer.forward(x.data(), y.data(), 2);
  const float inv_std = 1.0f / std::sqrt(3.5f + BatchNorm::kEpsilon);
  CHECK(y[0] == Approx(-2 * inv_std));
  CHECK(y[5] == Approx(3 * inv_std));
  CHECK(y[2] == 0.0f);
  CHECK(b.running()[0] == Approx(0.3));
  CHECK(b.running()[2] == Approx(0.9 + 0.1 * 3.5 * 4 / 3));
}

TEST_CASE("batch_norm evaluates with its running statistics", "[tasks][batch_norm]") {
  Bound b(Shape{2, 1, 1});
  b.set_params({2, 3, 1, -1});
  const std::vector<float> running = {0.5f, -1, 4, 0.25f};  // means, then variances
  b.layer.load_layer_state(running);
  CHECK(b.running() == running);
  b.layer.set_training(false);
  const std::vector<float> x = {1.5f, 0, 2.5f, 1};
  std::vector<float> y(4);
  b.layer.forward(x.data(), y.data(), 2);
  CHECK(y[0] == Approx(2 * (1.5 - 0.5) / std::sqrt(4 + 1e-5) + 1));
  CHECK(y[1] == Approx(3 * (0 + 1) / std::sqrt(0.25 + 1e-5) - 1));
  CHECK(y[2] == Approx(2 * (2.5 - 0.5) / std::sqrt(4 + 1e-5) + 1));
  CHECK(b.running() == running);  // evaluation leaves them alone
  std::vector<float> wrong(3);
  CHECK_THROWS_AS(b.layer.save_layer_state(wrong), ContractError);
  CHECK_THROWS_AS(BatchNorm(Shape{0, 1, 1}), ConfigError);
  // A batch above reserve's (8): refused, as Layer's contract says (SyncBN's dx scratch is sized
  // by it).
  b.layer.set_training(true);
  std::vector<float> big(2 * 9), big_y(big.size()), big_dx(big.size());
  CHECK_THROWS_AS(b.layer.forward(big.data(), big_y.data(), 9), ContractError);
  CHECK_THROWS_AS(b.layer.backward(big.data(), big_y.data(), big_y.data(), big_dx.data(), 9),
                  ContractError);
}

TEST_CASE("batch_norm gradients match finite differences, 1-d and 2-d", "[tasks][batch_norm]") {
  for (const auto& [shape, batch] :
       std::vector<std::pair<Shape, std::size_t>>{{Shape::flat(3), 5}, {Shape{2, 3, 2}, 3}}) {
    INFO("input " << to_string(shape) << ", batch " << batch);
    BatchNorm layer(shape);
    testing::LayerHarness h(layer, batch, 1);
    // gamma, beta not 1, 0 (copied in: the layer is bound to the harness's storage)
    const std::vector<float> params = testing::random_floats(h.params.size(), 7, 0.5f, 1.5f);
    std::copy(params.begin(), params.end(), h.params.begin());
    h.check();
  }
}

TEST_CASE("a model's checkpoint carries its running statistics, and profiling leaves them",
          "[tasks][batch_norm][checkpoint]") {
  const auto specs =
      parse_layer_specs({"conv2d:3:3:1:1", "batch_norm", "relu", "flatten", "dense:4", "batch_norm",
                         "dense:3", "softmax_cross_entropy"});
  Model a(specs, Shape{1, 4, 4}, 4, 3);
  CHECK(a.layer(1).state_size() == 6);
  CHECK(a.layer(5).state_size() == 8);
  const std::vector<float> x = testing::random_floats(4 * 16, 11);
  const std::vector<std::int32_t> y{0, 1, 2, 1};
  for (int i = 0; i < 3; ++i) (void)a.forward_backward(x, y);

  std::vector<float> before(6);
  a.layer(1).save_layer_state(before);
  (void)profile_layers(a, 4, 2, 9);  // random inputs, training mode
  std::vector<float> after(6);
  a.layer(1).save_layer_state(after);
  CHECK(after == before);

  engine::StateWriter out;
  a.save_state(out);
  Model b(specs, Shape{1, 4, 4}, 4, 3);
  engine::StateReader in(out.bytes(), "test");
  b.load_state(in);
  in.expect_end();
  for (const std::size_t l : {std::size_t{1}, std::size_t{5}}) {
    std::vector<float> sa(a.layer(l).state_size()), sb(sa.size());
    a.layer(l).save_layer_state(sa);
    b.layer(l).save_layer_state(sb);
    CHECK(sa == sb);
  }
  // Evaluation uses them: both models give the same logits bitwise.
  std::vector<float> la(4 * 3), lb(4 * 3);
  a.predict(x, la);
  b.predict(x, lb);
  CHECK(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)) == 0);
  // And the next training step matches too.
  CHECK(a.forward_backward(x, y) == b.forward_backward(x, y));
}

TEST_CASE("batch_norm on oneDNN gives the builtin loops' results, with its ReLU fused or not",
          "[tasks][batch_norm][onednn]") {
  if (!cpu::onednn_built()) return;
  // The same layer on each kernel set, on each layout, its output (and its ReLU's) and every
  // gradient compared. Tolerance: oneDNN sums in another order; the measured differences
  // (2026-12-06) are up to 4.6e-7 of the largest value, so 1e-4 of it separates rounding from a
  // wrong term (which is off by O(1)).
  // The largest difference relative to the largest value.
  const auto difference = [](const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    double scale = 0, worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, static_cast<double>(std::abs(a[i])));
      worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    }
    return worst / scale;
  };
  struct Case {
    Shape shape;
    std::size_t batch;
    Layout layout;
  };
  for (const auto& [shape, batch, layout] :
       {Case{Shape{16, 5, 5}, 6, Layout::kNchw}, Case{Shape{32, 3, 3}, 5, Layout::kBlocked16},
        Case{Shape{16, 7, 7}, 4, Layout::kBlocked16}, Case{Shape{24, 5, 5}, 3, Layout::kBlocked8},
        Case{Shape{16, 7, 7}, 4, Layout::kBlocked8}, Case{Shape::flat(24), 7, Layout::kNchw},
        Case{Shape{3, 4, 4}, 3, Layout::kNchw}}) {
    for (const bool relu : {false, true}) {
      INFO(to_string(shape) << ", batch " << batch << ", channel block " << channel_block(layout)
                            << (relu ? ", with its ReLU" : ""));
      const std::size_t n = batch * shape.size();
      const auto x = testing::random_floats(n, 3, -2.0f, 3.0f);
      const auto dy = testing::random_floats(n, 4);
      const auto gamma_beta = testing::random_floats(2 * shape.channels, 5, 0.5f, 1.5f);
      struct Result {
        std::vector<float> y, dx, grads, running, eval_y;
      };
      const auto run = [&](cpu::CpuKernels kernels) {
        const testing::ScopedKernels use(kernels);
        BatchNorm layer(shape);
        std::vector<float> params = gamma_beta, grads(params.size());
        layer.bind(params, grads);
        layer.reserve(8);
        layer.initialize(1);
        std::copy(gamma_beta.begin(), gamma_beta.end(), params.begin());
        layer.set_layouts(layout, layout);
        // The builtin loops refuse the ReLU: it runs after them, as the ReLU layer would.
        const bool fused = relu && layer.fuse_relu();
        CHECK(fused == (relu && kernels == cpu::CpuKernels::kOnednn));
        Result r{std::vector<float>(n), std::vector<float>(n), {}, {}, std::vector<float>(n)};
        layer.forward(x.data(), r.y.data(), batch);
        std::vector<float> masked = dy;
        if (relu && !fused) {
          for (std::size_t i = 0; i < n; ++i) {
            r.y[i] = r.y[i] > 0.0f ? r.y[i] : 0.0f;
            masked[i] = r.y[i] > 0.0f ? dy[i] : 0.0f;
          }
        }
        layer.backward(x.data(), r.y.data(), fused ? dy.data() : masked.data(), r.dx.data(), batch);
        r.grads = grads;
        r.running.resize(layer.state_size());
        layer.save_layer_state(r.running);
        layer.set_training(false);
        layer.forward(x.data(), r.eval_y.data(), batch);
        if (relu && !fused) {
          for (float& v : r.eval_y) v = v > 0.0f ? v : 0.0f;
        }
        return r;
      };
      const Result builtin = run(cpu::CpuKernels::kBuiltin);
      const Result onednn = run(cpu::CpuKernels::kOnednn);
      CHECK(difference(builtin.y, onednn.y) <= 1e-4);
      CHECK(difference(builtin.dx, onednn.dx) <= 1e-4);
      CHECK(difference(builtin.grads, onednn.grads) <= 1e-4);
      CHECK(difference(builtin.running, onednn.running) <= 1e-4);
      CHECK(difference(builtin.eval_y, onednn.eval_y) <= 1e-4);
    }
  }
}

TEST_CASE("batch_norm is made from its spec", "[tasks][batch_norm][spec]") {
  CHECK(parse_layer_spec("batch_norm") == LayerSpec{"batch_norm"});
  CHECK(to_string(parse_layer_spec("batch_norm")) == "batch_norm");
  const auto layer = make_layer(parse_layer_spec("batch_norm"), Shape{8, 5, 5});
  CHECK(layer->kind() == "batch_norm");
  CHECK(layer->output_shape() == Shape{8, 5, 5});
  CHECK(layer->parameter_count() == 16);
}

}  // namespace gradmesh::tasks

namespace gradmesh::tasks {
namespace {

using gradmesh::testing::ThreadExchange;
using gradmesh::testing::ThreadGather;

}  // namespace

TEST_CASE("SyncBN: n nodes of K samples compute what one node of n K does",
          "[tasks][batch_norm][sync]") {
  const Shape shape{3, 2, 2};
  const std::size_t per = shape.size();
  for (const std::size_t nodes : {2, 3}) {
    constexpr std::size_t kPerNode = 2;
    const std::size_t total = nodes * kPerNode;
    INFO(nodes << " nodes");
    SplitMix64 rng(17 + nodes);
    std::vector<float> x(total * per), dy(total * per);
    for (float& v : x) v = 4.0f * rng.next_float() - 1.0f;
    for (float& v : dy) v = rng.next_float() - 0.5f;
    const std::vector<float> params = {1.5f, 0.5f, -1.0f, 0.25f, 0.0f, -0.5f};

    // One node of n K: the reference (dy of the mean loss over n K samples).
    Bound single(shape);
    single.set_params(params);
    std::vector<float> y_single(total * per), dx_single(total * per);
    single.layer.forward(x.data(), y_single.data(), total);
    single.layer.backward(x.data(), y_single.data(), dy.data(), dx_single.data(), total);

    // n nodes of K: each node's loss is the mean over its K samples, so its dy is n times the
    // reference's rows.
    ThreadGather gather(nodes);
    std::vector<std::unique_ptr<Bound>> layers;
    std::vector<std::unique_ptr<ThreadExchange>> exchanges;
    for (std::size_t r = 0; r < nodes; ++r) {
      layers.push_back(std::make_unique<Bound>(shape));
      layers.back()->set_params(params);
      exchanges.push_back(std::make_unique<ThreadExchange>(gather, r));
      layers.back()->layer.set_statistics_exchange(exchanges.back().get());
    }
    std::vector<float> y(total * per), dx(total * per);
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < nodes; ++r) {
      threads.emplace_back([&, r] {
        const std::size_t at = r * kPerNode * per;
        std::vector<float> dy_node(dy.begin() + at, dy.begin() + at + kPerNode * per);
        for (float& v : dy_node) v *= static_cast<float>(nodes);
        layers[r]->layer.forward(x.data() + at, y.data() + at, kPerNode);
        layers[r]->layer.backward(x.data() + at, y.data() + at, dy_node.data(), dx.data() + at,
                                  kPerNode);
      });
    }
    for (std::thread& t : threads) t.join();
    CHECK(gather.calls == 2);  // one gather forward, one backward
    for (std::size_t i = 0; i < y.size(); ++i) {
      CHECK(y[i] == Approx(y_single[i]).margin(1e-5));
      CHECK(dx[i] == Approx(static_cast<float>(nodes) * dx_single[i]).margin(1e-5));
    }
    // The nodes' parameter gradients average to the reference's (the sync stage's mean).
    for (std::size_t k = 0; k < params.size(); ++k) {
      double mean = 0;
      for (const auto& l : layers) mean += l->grads[k] / static_cast<double>(nodes);
      CHECK(mean == Approx(single.grads[k]).margin(1e-5));
    }
    // Every node's running statistics are the global batch's, as the single node's.
    const std::vector<float> expected = single.running();
    for (const auto& l : layers) {
      const std::vector<float> running = l->running();
      for (std::size_t k = 0; k < running.size(); ++k) {
        CHECK(running[k] == Approx(expected[k]).margin(1e-6));
      }
    }
    // Evaluation mode exchanges nothing.
    for (const auto& l : layers) l->layer.set_training(false);
    layers[0]->layer.forward(x.data(), y.data(), kPerNode);
    CHECK(gather.calls == 2);
  }
}

}  // namespace gradmesh::tasks

namespace gradmesh::tasks {

TEST_CASE("SyncBN: a residual model on n nodes has the gradients of the model on the union batch",
          "[tasks][batch_norm][sync]") {
  // Channel counts under 8, so that no activation is blocked on oneDNN's kernels (a device
  // model's are NCHW, and a convolution in another layout rounds otherwise: the bitwise check
  // below compares the SyncBN paths, not the layouts).
  const auto specs =
      parse_layer_specs({"conv2d:4:3:1:1", "batch_norm", "relu", "basic_block:4", "basic_block:6:2",
                         "global_avg_pool", "dense:10", "softmax_cross_entropy"});
  const Shape shape{1, 28, 28};
  constexpr std::size_t kNodes = 2, kPerNode = 16;
  SplitMix64 rng(5);
  std::vector<float> x(kNodes * kPerNode * shape.size());
  std::vector<std::int32_t> y(kNodes * kPerNode);
  for (float& v : x) v = 2.0f * rng.next_float() - 1.0f;
  for (auto& v : y) v = static_cast<std::int32_t>(rng.next_below(10));
  Model single(specs, shape, kNodes * kPerNode, 3);
  (void)single.forward_backward(x, y);
  const auto expected = single.gradients();

  // The n nodes, one a thread, on the CPU or each on an emulated device (the device path:
  // statistics down, combined on the host, up again); their gradients, by rank.
  const auto nodes = [&](bool device) {
    ThreadGather gather(kNodes);
    std::vector<std::unique_ptr<Model>> models;
    std::vector<std::unique_ptr<ThreadExchange>> exchanges;
    for (std::size_t r = 0; r < kNodes; ++r) {
      models.push_back(
          std::make_unique<Model>(specs, shape, kPerNode, 3,
                                  device ? std::make_unique<testing::EmulatedDevice>() : nullptr));
      exchanges.push_back(std::make_unique<ThreadExchange>(gather, r));
      for (std::size_t l = 0; l < models[r]->num_layers(); ++l) {
        if (auto* bn = dynamic_cast<BatchNorm*>(&models[r]->layer(l))) {
          bn->set_statistics_exchange(exchanges[r].get());
        }
      }
    }
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < kNodes; ++r) {
      threads.emplace_back([&, r] {
        const std::size_t at = r * kPerNode;
        (void)models[r]->forward_backward(
            std::span<const float>(x).subspan(at * shape.size(), kPerNode * shape.size()),
            std::span<const std::int32_t>(y).subspan(at, kPerNode));
      });
    }
    for (std::thread& t : threads) t.join();
    std::vector<std::vector<float>> gradients;
    for (const auto& m : models)
      gradients.emplace_back(m->gradients().begin(), m->gradients().end());
    return gradients;
  };
  const auto cpu = nodes(false);
  double worst = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    double mean = 0;
    for (const auto& g : cpu) mean += g[i] / static_cast<double>(kNodes);
    worst = std::max(worst, std::abs(mean - static_cast<double>(expected[i])));
  }
  CHECK(worst <= 1e-6);
  CHECK(nodes(true) == cpu);  // bit for bit on a device
}

}  // namespace gradmesh::tasks
