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
  float* slot = slot_of(round_);
  float* acc = accumulated_.data();
  const float* g = gradient.data();
  if (!open_retired_) {
    // The open round's first gradient: its slot still holds G_(r-p), which leaves g* in the same
    // pass that stores G_r = g (one pass over m floats, where retiring first would take two).
    for (std::size_t i = 0; i < floats_; ++i) {
      acc[i] += g[i] - slot[i];
      slot[i] = g[i];
    }
    open_retired_ = true;
  } else {
    for (std::size_t i = 0; i < floats_; ++i) {
      slot[i] += g[i];
      acc[i] += g[i];
    }
  }
  ++pending_;
}

std::span<const float> AccumulationQueue::accumulated() const {
  retire_open();
  return accumulated_;
}

void AccumulationQueue::advance() {
  retire_open();  // a no-op unless the round stayed empty
  ++round_;
  pending_ = 0;
  open_retired_ = false;
}

void AccumulationQueue::retire_open() const {
  if (open_retired_) return;
  float* slot = slot_of(round_);
  float* acc = accumulated_.data();
  for (std::size_t i = 0; i < floats_; ++i) acc[i] -= slot[i];
  std::fill_n(slot, floats_, 0.0f);
  open_retired_ = true;
}

float* AccumulationQueue::slot_of(std::uint64_t r) const noexcept {
  return slots_.data() + static_cast<std::size_t>(r % partitions_) * floats_;
}

std::span<const float> AccumulationQueue::round_gradient(std::uint64_t r) const {
  GRADMESH_CHECK(r <= round_ && r + partitions_ > round_,
                 "round no longer (or not yet) in the ring");
  if (r == round_) retire_open();
  return {slot_of(r), floats_};
}

void AccumulationQueue::window_sum(Range range, std::size_t window, std::span<float> out) const {
  GRADMESH_CHECK(window >= 1 && window <= partitions_, "window of 0 or beyond the ring");
  GRADMESH_CHECK(range.offset <= floats_ && range.size <= floats_ - range.offset,
                 "range beyond the gradient");
  GRADMESH_CHECK_EQ(out.size(), range.size, "output floats");
  if (window == partitions_) {
    const std::span<const float> acc = accumulated();
    std::copy_n(acc.data() + range.offset, range.size, out.data());
    return;
  }
  std::fill(out.begin(), out.end(), 0.0f);
  const std::uint64_t first = round_ + 1 >= window ? round_ + 1 - window : 0;
  for (std::uint64_t s = first; s <= round_; ++s) {
    const float* g = round_gradient(s).data() + range.offset;
    for (std::size_t i = 0; i < range.size; ++i) out[i] += g[i];
  }
}

void undelivered(const AccumulationQueue& queue, const RangePartition& partition, std::size_t peer,
                 std::span<float> out) {
  const std::size_t p = partition.partitions();
  GRADMESH_CHECK(p <= queue.partitions(), "a partition count above the queue's ring");
  GRADMESH_CHECK_EQ(partition.floats(), queue.floats(), "partition floats");
  GRADMESH_CHECK_EQ(out.size(), queue.floats(), "output floats");
  const std::uint64_t open = queue.round();
  for (std::size_t k = 0; k < p; ++k) {
    // The last closed round r < open with (peer + r) mod p == k, if any: r = open - d, where
    // d in [1, p] is the distance from the open round back to it.
    const std::uint64_t d = ((static_cast<std::uint64_t>(peer) + open) % p + p - k) % p;
    const std::uint64_t back = d == 0 ? p : d;
    const std::uint64_t first = open >= back ? open - back + 1 : 0;  // first round not yet sent
    const Range range = partition.range(k);
    float* dst = out.data() + range.offset;
    std::fill_n(dst, range.size, 0.0f);
    for (std::uint64_t s = first; s <= open; ++s) {
      const float* g = queue.round_gradient(s).data() + range.offset;
      for (std::size_t i = 0; i < range.size; ++i) dst[i] += g[i];
    }
  }
}

}  // namespace gradmesh::sync::ako
