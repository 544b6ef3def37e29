#include "sync/ako/join_exchange.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "engine/error.h"
#include "sync/ako/messages.h"

namespace gradmesh::sync::ako {

JoinExchange::JoinExchange(std::size_t floats) : floats_(floats) {
  GRADMESH_CHECK(floats >= 1, "JoinExchange: a model of at least one float");
}

void JoinExchange::request(std::size_t peer) {
  {
    const std::lock_guard lock(mutex_);
    requests_.push_back(peer);
  }
  requested_.store(true, std::memory_order_release);
}

std::vector<std::size_t> JoinExchange::take_requests() {
  std::vector<std::size_t> out;
  const std::lock_guard lock(mutex_);
  out.swap(requests_);
  requested_.store(false, std::memory_order_release);
  return out;
}

net::Payload JoinExchange::encode(std::span<const float> replica, double bandwidth) const {
  GRADMESH_CHECK(replica.size() == floats_, "JoinExchange::encode: a replica of m floats");
  net::Payload payload = net::Payload::allocate(floats_ * sizeof(float) + sizeof(double));
  std::memcpy(payload.mutable_bytes().data(), replica.data(), floats_ * sizeof(float));
  std::memcpy(payload.mutable_bytes().data() + floats_ * sizeof(float), &bandwidth, sizeof(double));
  return payload;
}

std::uint64_t JoinExchange::key(std::size_t p1, std::size_t p) noexcept {
  return (static_cast<std::uint64_t>(p) << kPartitionShift) | static_cast<std::uint64_t>(p1);
}

std::string JoinExchange::offer(net::Message&& message) {
  const std::uint64_t p1 = message.key & 0xffffffffu;
  const std::uint64_t p = message.key >> kPartitionShift;
  const std::size_t bytes = floats_ * sizeof(float) + sizeof(double);
  double bandwidth = -1;
  if (message.payload.size() == bytes) {
    std::memcpy(&bandwidth, message.payload.bytes().data() + floats_ * sizeof(float),
                sizeof(double));
  }
  if (message.payload.size() != bytes || p1 < 1 || p < 1 || p1 > floats_ || p > floats_ ||
      !std::isfinite(bandwidth) || bandwidth < 0) {
    return "a replica to rejoin with of " + std::to_string(message.payload.size()) +
           " bytes at p = " + std::to_string(p) + " (expected " + std::to_string(bytes) +
           " bytes: m floats and B >= 0, 1 <= p <= m)";
  }
  {
    const std::lock_guard lock(mutex_);
    if (state_ || taken_) return "a second replica to rejoin with";
    state_ = std::move(message);
  }
  changed_.notify_all();
  return {};
}

std::optional<net::Message> JoinExchange::await(std::chrono::duration<double> timeout,
                                                const std::function<bool()>& give_up) {
  std::unique_lock lock(mutex_);
  (void)changed_.wait_for(lock, timeout, [&] { return state_.has_value() || give_up(); });
  if (!state_) return std::nullopt;
  std::optional<net::Message> out = std::move(state_);
  state_.reset();
  taken_ = true;
  return out;
}

void JoinExchange::wake() {
  { const std::lock_guard lock(mutex_); }  // a waiter between its check and its wait sees it
  changed_.notify_all();
}

JoinState JoinExchange::decode(const net::Message& message) const {
  JoinState s;
  s.clock = message.round;
  s.p1 = static_cast<std::size_t>(message.key & 0xffffffffu);
  s.partitions = static_cast<std::size_t>(message.key >> kPartitionShift);
  s.replica = message.payload.bytes().first(floats_ * sizeof(float));
  std::memcpy(&s.bandwidth, message.payload.bytes().data() + floats_ * sizeof(float),
              sizeof(double));
  return s;
}

}  // namespace gradmesh::sync::ako
