#include "sync/ako/accumulation_queue.h"

#include <algorithm>

#include "engine/error.h"

namespace gradmesh::sync::ako {

namespace {

std::size_t checked_slot_floats(std::size_t floats, std::size_t partitions) {
  GRADMESH_CHECK(floats >= 1, "AccumulationQueue of an empty gradient");
  GRADMESH_CHECK(partitions >= 1, "AccumulationQueue with p = 0");
  return floats * partitions;
}

}  // namespace

AccumulationQueue::AccumulationQueue(std::size_t floats, std::size_t partitions)
    : floats_(floats),
      partitions_(partitions),
      slots_(checked_slot_floats(floats, partitions), 0.0f),
      accumulated_(floats, 0.0f) {}

void AccumulationQueue::add(std::span<const float> gradient) {
  GRADMESH_CHECK_EQ(gradient.size(), floats_, "gradient size");
  float* slot = slots_.data() + static_cast<std::size_t>(round_ % partitions_) * floats_;
  float* acc = accumulated_.data();
  const float* g = gradient.data();
  for (std::size_t i = 0; i < floats_; ++i) {
    slot[i] += g[i];
    acc[i] += g[i];
  }
  ++pending_;
}

void AccumulationQueue::advance() {
  ++round_;
  pending_ = 0;
  // The slot of round r + 1 held G_(r+1-p), the oldest round still in g*.
  float* slot = slots_.data() + static_cast<std::size_t>(round_ % partitions_) * floats_;
  float* acc = accumulated_.data();
  for (std::size_t i = 0; i < floats_; ++i) acc[i] -= slot[i];
  std::fill_n(slot, floats_, 0.0f);
}

}  // namespace gradmesh::sync::ako
