#include "tasks/layers/gradient_check.h"

#include <algorithm>

#include "engine/error.h"
#include "tasks/random.h"

namespace gradmesh::tasks {
namespace {

std::vector<float> random_floats(std::size_t n, SplitMix64& rng) {
  std::vector<float> v(n);
  for (float& x : v) x = -1.0f + 2.0f * rng.next_float();
  return v;
}

}  // namespace

std::string GradientCheckResult::describe() const {
  std::string out = "checked " + std::to_string(checked) + ", skipped " + std::to_string(skipped) +
                    ", " + std::to_string(mismatches.size()) + " mismatch(es)";
  for (std::size_t i = 0; i < std::min<std::size_t>(5, mismatches.size()); ++i) {
    const GradientMismatch& m = mismatches[i];
    out += (i == 0 ? ": " : "; ") + std::string(m.parameter ? "parameter " : "input ") +
           std::to_string(m.index) + " analytic " + std::to_string(m.analytic) + " numeric " +
           std::to_string(m.numeric);
  }
  return out;
}

GradientCheckResult check_layer_gradients(Layer& layer, const GradientCheckOptions& options) {
  GRADMESH_CHECK(layer.backend().host_addressable(),
                 "check_layer_gradients needs a layer on the host CPU backend");
  const std::size_t batch = options.batch;
  SplitMix64 rng(options.seed);
  std::vector<float> params(layer.parameter_count()), grads(layer.parameter_count());
  std::vector<float> x = random_floats(batch * layer.input_size(), rng);
  const std::vector<float> r = random_floats(batch * layer.output_size(), rng);
  std::vector<float> y(batch * layer.output_size()), dx(batch * layer.input_size());
  layer.bind(params, grads);
  layer.reserve(batch);
  layer.initialize(options.seed);

  const auto objective = [&] {
    layer.forward(x.data(), y.data(), batch);
    double l = 0.0;
    for (std::size_t i = 0; i < y.size(); ++i) l += static_cast<double>(y[i]) * r[i];
    return l;
  };
  objective();
  layer.backward(x.data(), y.data(), r.data(), dx.data(), batch);
  const std::vector<float> analytic_grads = grads, analytic_dx = dx;
  GradientCheckResult result;
  const auto compare = [&](bool parameter, std::vector<float>& values,
                           const std::vector<float>& analytic) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto numeric = finite_difference(values[i], objective, options);
      if (!numeric) {
        ++result.skipped;
        continue;
      }
      ++result.checked;
      if (!derivatives_agree(analytic[i], *numeric, options.relative_tolerance,
                             options.absolute_tolerance)) {
        result.mismatches.push_back({parameter, i, analytic[i], *numeric});
      }
    }
  };
  compare(true, params, analytic_grads);
  compare(false, x, analytic_dx);
  return result;
}

}  // namespace gradmesh::tasks
