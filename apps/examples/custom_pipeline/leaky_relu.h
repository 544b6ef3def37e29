#pragma once
// A user-defined layer: the leaky rectified linear unit, y = x for x > 0, else slope * x. It shows
// the public layer interface (tasks/layers/layer.h) and how a layer kind is registered so that a
// job config can name it: model.layers = [..., "leaky_relu:0.01", ...].
//
// It computes on the host (plain loops over the batch), so it runs with compute.device = cpu only.

#include <charconv>
#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "engine/error.h"
#include "tasks/layers/layer.h"
#include "tasks/layers/layer_registry.h"

namespace custom {

class LeakyRelu final : public gradmesh::tasks::Layer {
 public:
  /// On samples of `shape` (any), with the given negative slope in [0, 1).
  LeakyRelu(gradmesh::tasks::Shape shape, float slope)
      : Layer(shape, shape), features_(shape.size()), slope_(slope) {}

  [[nodiscard]] std::string_view kind() const noexcept override { return "leaky_relu"; }

  void forward(const float* x, float* y, std::size_t batch) override {
    check_host();
    for (std::size_t i = 0; i < batch * features_; ++i) y[i] = x[i] > 0.0f ? x[i] : slope_ * x[i];
  }

  void backward(const float* x, const float* /*y*/, const float* dy, float* dx,
                std::size_t batch) override {
    if (dx == nullptr) return;
    for (std::size_t i = 0; i < batch * features_; ++i)
      dx[i] = x[i] > 0.0f ? dy[i] : slope_ * dy[i];
  }

  /// The factory for tasks::register_layer: "leaky_relu" (slope 0.01) or "leaky_relu:<slope>".
  static std::unique_ptr<Layer> make(const gradmesh::tasks::LayerSpec& spec,
                                     gradmesh::tasks::Shape input) {
    float slope = 0.01f;
    if (!spec.args.empty()) {
      const char* end = spec.args.data() + spec.args.size();
      const auto [ptr, ec] = std::from_chars(spec.args.data(), end, slope);
      if (ec != std::errc() || ptr != end || !std::isfinite(slope) || slope < 0.0f ||
          slope >= 1.0f) {
        throw gradmesh::ConfigError(
            "expected 'leaky_relu[:<slope>]' with 0 <= slope < 1, got "
            "slope '" +
            spec.args + "'");
      }
    }
    return std::make_unique<LeakyRelu>(input, slope);
  }

 private:
  void check_host() const {
    if (!backend().host_addressable()) {
      throw gradmesh::ConfigError("leaky_relu computes on the CPU only (compute.device = cpu)");
    }
  }

  std::size_t features_;
  float slope_;
};

}  // namespace custom
