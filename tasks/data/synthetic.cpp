#include "tasks/data/synthetic.h"

#include <string>

#include "engine/error.h"
#include "tasks/random.h"

namespace gradmesh::tasks {

namespace {

/// The streams of a task: one for the prototypes, one per example's noise, one for its label.
constexpr std::uint64_t kPrototypeStream = 0x5eed'0000'0000'0001ULL;
constexpr std::uint64_t kNoiseStream = 0x5eed'0000'0000'0002ULL;
constexpr std::uint64_t kLabelStream = 0x5eed'0000'0000'0003ULL;

std::uint64_t stream(std::uint64_t seed, std::uint64_t kind, std::uint64_t index) noexcept {
  return SplitMix64::mix(SplitMix64::mix(seed ^ kind) + index);
}

}  // namespace

SyntheticTask::SyntheticTask(Shape shape, std::size_t classes, std::uint64_t seed)
    : shape_(shape), features_(shape.size()), classes_(classes), seed_(seed) {
  if (features_ == 0) {
    throw ConfigError("synthetic data: a sample of shape " + to_string(shape) + " holds no float");
  }
  if (classes_ < 2) {
    throw ConfigError("synthetic data: " + std::to_string(classes) +
                      " class(es), expected at least 2");
  }
  prototypes_.resize(classes_ * features_);
  SplitMix64 rng(stream(seed_, kPrototypeStream, 0));
  for (float& p : prototypes_) p = 2.0f * rng.next_float() - 1.0f;
}

std::int32_t SyntheticTask::label(std::uint64_t index) const noexcept {
  return static_cast<std::int32_t>(stream(seed_, kLabelStream, index) % classes_);
}

void SyntheticTask::write(std::uint64_t index, std::span<float> out) const {
  GRADMESH_CHECK_EQ(out.size(), features_, "SyntheticTask::write: floats of one sample");
  const float* prototype = prototypes_.data() + static_cast<std::size_t>(label(index)) * features_;
  SplitMix64 rng(stream(seed_, kNoiseStream, index));
  for (std::size_t f = 0; f < features_; ++f) {
    out[f] = prototype[f] + (2.0f * rng.next_float() - 1.0f);
  }
}

Dataset SyntheticTask::make(std::uint64_t first, std::size_t count) const {
  Dataset d;
  d.count = count;
  d.features = features_;
  d.classes = classes_;
  d.shape = shape_;
  d.x.resize(count * features_);
  d.y.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    write(first + i, std::span(d.x).subspan(i * features_, features_));
    d.y[i] = label(first + i);
  }
  return d;
}

}  // namespace gradmesh::tasks
