#pragma once
// A user-defined pre-processing task: on-the-fly augmentation that shifts each image of the batch
// by up to `max_shift` pixels in each direction (zeros shifted in), a fresh random shift per image
// and iteration. Deterministic: the shifts are a function of (seed, rank, epoch, iteration), so a
// rerun with the same config trains the same model.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "apps/pipeline/data_source.h"
#include "engine/error.h"
#include "tasks/random.h"
#include "tasks/shape.h"

namespace custom {

class RandomShift {
 public:
  RandomShift(gradmesh::tasks::Shape shape, int max_shift, std::uint64_t seed, std::size_t rank)
      : shape_(shape), max_shift_(max_shift), seed_(seed), rank_(rank), scratch_(shape.size()) {}

  /// The pre-processing task's body (apps/pipeline PreprocessFn): shifts batch.input in place.
  void operator()(gradmesh::app::Batch& batch) {
    const std::size_t c = shape_.channels, h = shape_.height, w = shape_.width;
    gradmesh::tasks::SplitMix64 rng(seed_ ^ (rank_ << 48) ^ (batch.epoch << 32) ^ batch.iteration);
    const auto span = static_cast<std::uint64_t>(2 * max_shift_ + 1);
    for (std::size_t s = 0; s < batch.size(); ++s) {
      const int dy = static_cast<int>(rng.next_below(span)) - max_shift_;
      const int dx = static_cast<int>(rng.next_below(span)) - max_shift_;
      float* image = batch.input.data() + s * shape_.size();
      std::copy(image, image + shape_.size(), scratch_.begin());
      for (std::size_t ch = 0; ch < c; ++ch) {
        for (std::size_t i = 0; i < h; ++i) {
          for (std::size_t j = 0; j < w; ++j) {
            const long si = static_cast<long>(i) - dy, sj = static_cast<long>(j) - dx;
            const bool inside =
                si >= 0 && sj >= 0 && si < static_cast<long>(h) && sj < static_cast<long>(w);
            image[(ch * h + i) * w + j] =
                inside ? scratch_[(ch * h + static_cast<std::size_t>(si)) * w +
                                  static_cast<std::size_t>(sj)]
                       : 0.0f;
          }
        }
      }
    }
  }

 private:
  gradmesh::tasks::Shape shape_;
  int max_shift_;
  std::uint64_t seed_;
  std::uint64_t rank_;
  std::vector<float> scratch_;  // one image, allocated once
};

}  // namespace custom
