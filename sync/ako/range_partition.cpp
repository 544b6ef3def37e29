#include "sync/ako/range_partition.h"

#include <string>

#include "engine/error.h"

namespace gradmesh::sync::ako {

RangePartition::RangePartition(std::size_t floats, std::size_t partitions)
    : floats_(floats), partitions_(partitions) {
  GRADMESH_CHECK(floats >= 1, "RangePartition of an empty vector");
  if (partitions < 1 || partitions > floats) {
    throw ConfigError("sync.ako.partitions = " + std::to_string(partitions) +
                      ": expected 1 <= p <= " + std::to_string(floats) +
                      " (the model's parameter count: a partition holds at least one float)");
  }
}

Range RangePartition::range(std::size_t k) const {
  GRADMESH_CHECK_LT(k, partitions_, "partition index out of range");
  const std::size_t base = floats_ / partitions_;
  const std::size_t extra = floats_ % partitions_;
  const std::size_t offset = k * base + (k < extra ? k : extra);
  return Range{offset, base + (k < extra ? 1 : 0)};
}

std::size_t RangePartition::max_range_floats() const noexcept {
  return (floats_ + partitions_ - 1) / partitions_;
}

}  // namespace gradmesh::sync::ako
