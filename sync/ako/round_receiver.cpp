#include "sync/ako/round_receiver.h"

#include "engine/error.h"
#include "sync/ako/messages.h"
#include "sync/ako/range_partition.h"

namespace gradmesh::sync::ako {

RoundReceiver::RoundReceiver(std::size_t nodes, std::size_t floats, StagingDelta& staging,
                             StalenessClocks& clocks)
    : floats_(floats),
      staging_(staging),
      clocks_(clocks),
      last_round_(nodes, 0),
      readmit_(nodes, 0) {
  GRADMESH_CHECK(staging.size() == floats, "RoundReceiver: a staging delta of the model's size");
}

std::string RoundReceiver::partition(std::size_t from, const net::Message& message, float lr) {
  const std::uint64_t p = message.key >> kPartitionShift;
  const std::uint64_t k = message.key & ((std::uint64_t{1} << kPartitionShift) - 1);
  if (p < 1 || p > floats_ || k >= p) {
    return "partition " + std::to_string(k) + " of p = " + std::to_string(p) +
           " (m = " + std::to_string(floats_) + " floats)";
  }
  const Range r =
      RangePartition(floats_, static_cast<std::size_t>(p)).range(static_cast<std::size_t>(k));
  if (message.payload.size() != r.size * sizeof(float)) {
    return "partition " + std::to_string(k) + " of p = " + std::to_string(p) + " with " +
           std::to_string(message.payload.size()) + " bytes (expected " +
           std::to_string(r.size * sizeof(float)) + ")";
  }
  const std::lock_guard lock(mutex_);
  if (message.round <= last_round_.at(from)) {
    return "a partition of round " + std::to_string(message.round) + " after round " +
           std::to_string(last_round_[from]);
  }
  last_round_[from] = message.round;
  staging_.add(r.offset, message.payload.as<float>(), -lr);  // line 13
  partitions_.fetch_add(1, std::memory_order_relaxed);
  advance_locked(from, message.round);
  return {};
}

std::string RoundReceiver::full_round(std::size_t from, const net::Message& message, float lr) {
  if (message.payload.size() != floats_ * sizeof(float)) {
    return "a full round of " + std::to_string(message.payload.size()) + " bytes (expected " +
           std::to_string(floats_ * sizeof(float)) + ")";
  }
  const std::lock_guard lock(mutex_);
  // A switch or the end may follow the last round without a new gradient: the same tag again.
  if (message.round < last_round_.at(from)) {
    return "a full round of round " + std::to_string(message.round) + " after round " +
           std::to_string(last_round_[from]);
  }
  last_round_[from] = message.round;
  staging_.add(0, message.payload.as<float>(), -lr);
  full_rounds_.fetch_add(1, std::memory_order_relaxed);
  advance_locked(from, message.round);
  return {};
}

void RoundReceiver::readmit(std::size_t peer) {
  const std::lock_guard lock(mutex_);
  last_round_.at(peer) = 0;
  readmit_.at(peer) = 1;
}

void RoundReceiver::advance_locked(std::size_t from, std::uint64_t round) {
  if (readmit_[from] != 0) {
    readmit_[from] = 0;
    clocks_.readmit(from, round);
  }
  clocks_.advance(from, round);  // line 14
}

}  // namespace gradmesh::sync::ako
