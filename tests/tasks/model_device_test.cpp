// The Model's device path (device buffers, pinned host staging, stale-parameter uploads, gradient
// downloads), run on the emulated device so it is tested on every machine: it must train bit for
// bit as the CPU model does.

#include <algorithm>
#include <catch2/catch.hpp>
#include <memory>
#include <span>
#include <vector>

#include "tasks/layers/loss.h"
#include "tasks/model.h"
#include "tasks/random.h"
#include "tests/tasks/emulated_device.h"

namespace gradmesh::tasks {
namespace {

std::vector<LayerSpec> cnn_specs() {
  return parse_layer_specs({"conv2d:6:3:1:1", "relu", "max_pool2d:2", "conv2d:8:3:2:1", "relu",
                            "flatten", "dropout:0.25", "dense:32", "relu", "dense:10",
                            "softmax_cross_entropy"});
}

/// A user's loss for the test: half the squared distance of the logits to the one-hot label,
/// summed over classes, meaned over the batch.
class SquaredError final : public Loss {
 public:
  float forward_backward(std::span<const float> z, std::span<const std::int32_t> y,
                         std::size_t classes, std::span<float> dz) override {
    return run(z, y, classes, dz.data());
  }
  float loss(std::span<const float> z, std::span<const std::int32_t> y,
             std::size_t classes) override {
    return run(z, y, classes, nullptr);
  }

 private:
  static float run(std::span<const float> z, std::span<const std::int32_t> y, std::size_t classes,
                   float* dz) {
    const auto batch = static_cast<float>(y.size());
    float total = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      for (std::size_t k = 0; k < classes; ++k) {
        const float d = z[i * classes + k] - (static_cast<std::size_t>(y[i]) == k ? 1.0f : 0.0f);
        total += 0.5f * d * d;
        if (dz != nullptr) dz[i * classes + k] = d / batch;
      }
    }
    return total / batch;
  }
};

}  // namespace

TEST_CASE("A user's loss computes on the host for a device model, as on the CPU",
          "[tasks][model][device]") {
  if (!is_registered_loss("test_squared_error")) {
    register_loss("test_squared_error",
                  [](const LayerSpec&, std::size_t) { return std::make_unique<SquaredError>(); });
  }
  const auto specs = parse_layer_specs({"dense:8", "relu", "dense:3", "test_squared_error"});
  constexpr std::size_t kBatch = 4;
  Model cpu(specs, 5, kBatch, 2);
  Model dev(specs, 5, kBatch, 2, std::make_unique<testing::EmulatedDevice>());
  REQUIRE(dev.on_device());
  std::vector<float> x(kBatch * 5);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i % 9) - 0.3f;
  const std::vector<std::int32_t> y = {2, 0, 1, 2};
  const float loss = cpu.forward_backward(x, y);
  CHECK(loss == dev.forward_backward(x, y));
  // The gradient went up to the device: every layer's gradients match bit for bit.
  const auto g_cpu = cpu.gradients(), g_dev = dev.gradients();
  CHECK(std::equal(g_cpu.begin(), g_cpu.end(), g_dev.begin()));
  const auto d_cpu = cpu.layer_output_gradient(2, kBatch),
             d_dev = dev.layer_output_gradient(2, kBatch);
  CHECK(std::equal(d_cpu.begin(), d_cpu.end(), d_dev.begin()));
  // The evaluation's loss is the user's.
  Dataset d;
  d.count = kBatch;
  d.features = 5;
  d.classes = 3;
  d.x = x;
  d.y = y;
  CHECK(cpu.evaluate(d).loss == Approx(loss));
  CHECK(dev.evaluate(d).loss == Approx(loss));
}

TEST_CASE("A device model trains bit for bit as the CPU model, through host staging",
          "[tasks][model][device]") {
  const Shape shape{2, 12, 12};
  constexpr std::size_t kBatch = 5;
  Model cpu(cnn_specs(), shape, kBatch, 11);
  auto device = std::make_unique<testing::EmulatedDevice>();
  testing::EmulatedDevice& emulated = *device;
  Model dev(cnn_specs(), shape, kBatch, 11, std::move(device));
  REQUIRE(dev.on_device());
  REQUIRE_FALSE(cpu.on_device());
  REQUIRE(dev.parameter_count() == cpu.parameter_count());
  // Spans taken once, written after every step: the way a PS shard or Ako holds them.
  const std::span<float> cpu_params = cpu.parameters();
  const std::span<float> dev_params = dev.parameters();
  CHECK(std::equal(cpu_params.begin(), cpu_params.end(), dev_params.begin()));

  SplitMix64 rng(3);
  std::vector<float> x(kBatch * shape.size());
  std::vector<std::int32_t> y(kBatch);
  for (int step = 0; step < 3; ++step) {
    for (float& v : x) v = 2.0f * rng.next_float() - 1.0f;
    for (auto& v : y) v = static_cast<std::int32_t>(rng.next_below(10));
    for (Model* m : {&cpu, &dev}) {
      const std::span<float> in = m->input(kBatch);
      std::copy(x.begin(), x.end(), in.begin());
      for (std::size_t l = 0; l < m->num_layers(); ++l) m->forward_layer(l, kBatch);
    }
    const auto logits_cpu = cpu.output(kBatch), logits_dev = dev.output(kBatch);
    REQUIRE(std::equal(logits_cpu.begin(), logits_cpu.end(), logits_dev.begin()));
    REQUIRE(cpu.loss_backward(y) == dev.loss_backward(y));
    for (std::size_t l = cpu.num_layers(); l-- > 0;) {
      cpu.backward_layer(l, kBatch);
      dev.backward_layer(l, kBatch);
      INFO("step " << step << " layer " << l);
      // What WFBP ships and SFB reads must be on the host when backward_layer returns.
      const auto g_cpu = cpu.layer_gradients(l), g_dev = dev.layer_gradients(l);
      REQUIRE(std::equal(g_cpu.begin(), g_cpu.end(), g_dev.begin()));
      const auto in_cpu = cpu.layer_input(l, kBatch), in_dev = dev.layer_input(l, kBatch);
      REQUIRE(std::equal(in_cpu.begin(), in_cpu.end(), in_dev.begin()));
      const auto d_cpu = cpu.layer_output_gradient(l, kBatch);
      const auto d_dev = dev.layer_output_gradient(l, kBatch);
      REQUIRE(std::equal(d_cpu.begin(), d_cpu.end(), d_dev.begin()));
    }
    // The optimizer step on the host, through the held spans.
    const auto g_cpu = cpu.gradients(), g_dev = dev.gradients();
    for (std::size_t i = 0; i < cpu_params.size(); ++i) {
      cpu_params[i] -= 0.1f * g_cpu[i];
      dev_params[i] -= 0.1f * g_dev[i];
    }
  }
  CHECK(std::equal(cpu_params.begin(), cpu_params.end(), dev_params.begin()));

  // After the step every layer is stale once: the next forward uploads the input and each layer
  // with parameters (conv, conv, dense, dense); a second forward only the input.
  std::size_t weighted = 0;
  for (std::size_t l = 0; l < dev.num_layers(); ++l) weighted += dev.layer(l).parameter_count() > 0;
  REQUIRE(weighted == 4);
  const std::size_t before = emulated.uploads;
  for (std::size_t l = 0; l < dev.num_layers(); ++l) dev.forward_layer(l, kBatch);
  CHECK(emulated.uploads - before == 1 + weighted);
  for (std::size_t l = 0; l < dev.num_layers(); ++l) dev.forward_layer(l, kBatch);
  CHECK(emulated.uploads - before == 2 + weighted);
  // Handing out a layer's span marks it stale: it is uploaded again.
  (void)dev.layer_parameters(0);
  for (std::size_t l = 0; l < dev.num_layers(); ++l) dev.forward_layer(l, kBatch);
  CHECK(emulated.uploads - before == 4 + weighted);
}

TEST_CASE("A device model keeps SFB's disabled parameter gradients untouched on the host",
          "[tasks][model][device]") {
  Model dev(parse_layer_specs({"dense:4", "relu", "dense:3", "softmax_cross_entropy"}), 6, 2, 1,
            std::make_unique<testing::EmulatedDevice>());
  dev.layer(2).set_parameter_gradients_enabled(false);
  const std::span<float> g = dev.layer_gradients(2);
  std::fill(g.begin(), g.end(), 42.0f);  // as if SFB had rebuilt them
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6};
  const std::vector<std::int32_t> y = {0, 2};
  dev.forward_backward(x, y);
  for (const float v : dev.layer_gradients(2)) CHECK(v == 42.0f);
  bool any_nonzero = false;
  for (const float v : dev.layer_gradients(0)) any_nonzero |= v != 0.0f;
  CHECK(any_nonzero);
}

TEST_CASE(
    "A layer updated on the device stays current there: forward, backward and "
    "mark_parameters_changed keep it, host reads download it",
    "[tasks][model][device]") {
  const auto specs = parse_layer_specs({"dense:4", "relu", "dense:3", "softmax_cross_entropy"});
  auto device = std::make_unique<testing::EmulatedDevice>();
  testing::EmulatedDevice& emulated = *device;
  Model dev(specs, 6, 2, 1, std::move(device));
  Model cpu(specs, 6, 2, 1);
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6};
  const std::vector<std::int32_t> y = {0, 2};
  const auto forward = [&x](Model& m) {
    const std::span<float> in = m.input(2);
    std::copy(x.begin(), x.end(), in.begin());
    for (std::size_t l = 0; l < m.num_layers(); ++l) m.forward_layer(l, 2);
    const auto out = m.output(2);
    return std::vector<float>(out.begin(), out.end());
  };
  (void)forward(dev);  // uploads every layer once

  // A sync stage updates layer 2 on the device (here a fill through the backend; SFB steps it).
  const std::span<float> p = dev.device_layer_parameters(2);
  REQUIRE(p.size() == dev.layer(2).parameter_count());
  dev.backend().fill(p.data(), p.size(), 0.5f);
  for (float& v : cpu.layer_parameters(2)) v = 0.5f;
  // Neither a backward pass nor mark_parameters_changed brings the old host copy back.
  (void)dev.loss_backward(y);
  for (std::size_t l = dev.num_layers(); l-- > 0;) dev.backward_layer(l, 2);
  dev.mark_parameters_changed();
  const std::size_t uploads = emulated.uploads;
  CHECK(forward(dev) == forward(cpu));
  CHECK(emulated.uploads - uploads == 2);  // the input and layer 0, not layer 2

  // A host read downloads the updated parameters, once; the host copy is then current and
  // uploaded before the next forward.
  const std::size_t downloads = emulated.downloads;
  const std::span<float> host = dev.layer_parameters(2);
  CHECK(emulated.downloads - downloads == 1);
  for (const float v : host) CHECK(v == 0.5f);
  (void)dev.layer_parameters(2);
  CHECK(emulated.downloads - downloads == 1);
  host[0] = 0.75f;  // the caller may write the span
  cpu.layer_parameters(2)[0] = 0.75f;
  CHECK(forward(dev) == forward(cpu));

  // device_layer_parameters uploads a host-current layer before handing out the device span;
  // parameters() downloads every device-current layer.
  dev.layer_parameters(2)[1] = -0.5f;  // a fresh span: the forward made both copies agree
  const std::size_t before_upload = emulated.uploads;
  const std::span<float> q = dev.device_layer_parameters(2);
  CHECK(emulated.uploads - before_upload == 1);
  dev.backend().scale(q.data(), q.size(), 2.0f);
  const std::span<float> all = dev.parameters();
  const std::span<const float> layer2 = all.subspan(dev.parameter_offset(2));
  CHECK(layer2[0] == 1.5f);
  CHECK(layer2[1] == -1.0f);
  CHECK(layer2[2] == 1.0f);
  const auto cpu0 = cpu.layer_parameters(0);
  CHECK(std::equal(cpu0.begin(), cpu0.end(), all.begin()));

  // On the CPU the device spans are the host slices.
  CHECK(cpu.device_layer_parameters(2).data() == cpu.layer_parameters(2).data());
  CHECK(cpu.device_layer_gradients(2).data() == cpu.layer_gradients(2).data());
}

}  // namespace gradmesh::tasks
