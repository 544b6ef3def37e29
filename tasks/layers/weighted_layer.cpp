#include "tasks/layers/weighted_layer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/error.h"
#include "tasks/random.h"

namespace gradmesh::tasks {

void WeightedLayer::bind(std::span<float> parameters, std::span<float> gradients) {
  GRADMESH_CHECK_EQ(parameters.size(), parameter_count(),
                    std::string(kind()) + " bind: parameters");
  GRADMESH_CHECK_EQ(gradients.size(), parameter_count(), std::string(kind()) + " bind: gradients");
  w_ = parameters.first(weight_count_);
  b_ = parameters.subspan(weight_count_);
  dw_ = gradients.first(weight_count_);
  db_ = gradients.subspan(weight_count_);
}

void WeightedLayer::glorot_uniform(std::uint64_t seed, std::size_t fan_in, std::size_t fan_out) {
  GRADMESH_CHECK(!w_.empty(), std::string(kind()) + " initialize before bind");
  const float a = std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
  SplitMix64 rng(seed);
  for (float& w : w_) w = (2.0f * rng.next_float() - 1.0f) * a;
  std::fill(b_.begin(), b_.end(), 0.0f);
}

}  // namespace gradmesh::tasks
