#include "sync/ako/staging_delta.h"

#include <algorithm>

#include "engine/error.h"

namespace gradmesh::sync::ako {

StagingDelta::StagingDelta(std::size_t floats)
    : delta_(floats, 0.0f), dirty_((floats + kBlock - 1) / kBlock, 0) {}

void StagingDelta::add(std::size_t offset, std::span<const float> values, float scale) {
  GRADMESH_CHECK(offset <= delta_.size() && values.size() <= delta_.size() - offset,
                 "StagingDelta::add: a range within the delta");
  if (values.empty()) return;
  const std::lock_guard lock(mutex_);
  float* delta = delta_.data() + offset;
  for (std::size_t i = 0; i < values.size(); ++i) delta[i] += scale * values[i];
  const std::size_t last = (offset + values.size() - 1) / kBlock;
  for (std::size_t b = offset / kBlock; b <= last; ++b) dirty_[b] = 1;
}

std::size_t StagingDelta::apply_to(std::span<float> parameters) {
  GRADMESH_CHECK(parameters.size() == delta_.size(),
                 "StagingDelta::apply_to: parameters of the delta's size");
  const std::lock_guard lock(mutex_);
  std::size_t visited = 0;
  for (std::size_t b = 0; b < dirty_.size(); ++b) {
    if (dirty_[b] == 0) continue;
    const std::size_t begin = b * kBlock;
    const std::size_t end = std::min(delta_.size(), begin + kBlock);
    for (std::size_t i = begin; i < end; ++i) {
      parameters[i] += delta_[i];
      delta_[i] = 0.0f;
    }
    dirty_[b] = 0;
    visited += end - begin;
  }
  return visited;
}

}  // namespace gradmesh::sync::ako
