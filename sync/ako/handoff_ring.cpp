#include "sync/ako/handoff_ring.h"

#include <cstring>

#include "engine/error.h"

namespace gradmesh::sync::ako {

HandoffRing::HandoffRing(std::size_t floats, std::size_t slots)
    : floats_(floats), slots_(slots), counts_(slots, 0) {
  GRADMESH_CHECK(floats >= 1, "HandoffRing of an empty gradient");
  GRADMESH_CHECK(slots >= 2, "HandoffRing needs at least 2 slots");
  buffers_.assign(floats * slots, 0.0f);
}

void HandoffRing::put(std::span<const float> gradient) {
  GRADMESH_CHECK_EQ(gradient.size(), floats_, "gradient size");
  const std::lock_guard lock(mutex_);
  if (used_ < slots_) {
    const std::size_t slot = (head_ + used_) % slots_;
    std::memcpy(buffers_.data() + slot * floats_, gradient.data(), gradient.size_bytes());
    counts_[slot] = 1;
    ++used_;
    return;
  }
  // Full: the newest slot is never the claimed one (that is head_, and used_ = slots_ >= 2).
  const std::size_t slot = (head_ + used_ - 1) % slots_;
  float* dst = buffers_.data() + slot * floats_;
  for (std::size_t i = 0; i < floats_; ++i) dst[i] += gradient[i];
  ++counts_[slot];
}

std::optional<HandoffRing::Claimed> HandoffRing::claim() {
  const std::lock_guard lock(mutex_);
  GRADMESH_CHECK(!claimed_, "HandoffRing: a slot is already claimed");
  if (used_ == 0) return std::nullopt;
  claimed_ = true;
  return Claimed{std::span<const float>(buffers_.data() + head_ * floats_, floats_),
                 counts_[head_]};
}

void HandoffRing::release() {
  const std::lock_guard lock(mutex_);
  GRADMESH_CHECK(claimed_, "HandoffRing: release() without claim()");
  claimed_ = false;
  counts_[head_] = 0;
  head_ = (head_ + 1) % slots_;
  --used_;
}

std::size_t HandoffRing::filled() const {
  const std::lock_guard lock(mutex_);
  return used_ - (claimed_ ? 1 : 0);
}

std::uint64_t HandoffRing::pending_gradients() const {
  const std::lock_guard lock(mutex_);
  std::uint64_t n = 0;
  for (std::size_t i = claimed_ ? 1 : 0; i < used_; ++i) n += counts_[(head_ + i) % slots_];
  return n;
}

}  // namespace gradmesh::sync::ako
