#include "sync/ako/final_exchange.h"

#include <utility>

#include "engine/error.h"

namespace gradmesh::sync::ako {

FinalExchange::FinalExchange(std::size_t rank, std::size_t nodes, std::size_t floats)
    : rank_(rank), nodes_(nodes), floats_(floats), done_(nodes, 0), replicas_(nodes) {
  GRADMESH_CHECK(rank < nodes, "FinalExchange: rank < nodes");
}

std::string FinalExchange::done(std::size_t from) {
  GRADMESH_CHECK(from < nodes_, "FinalExchange::done: a rank of the job");
  {
    const std::lock_guard lock(mutex_);
    if (done_[from] != 0) return "a second end-of-job marker";
    done_[from] = 1;
  }
  changed_.notify_all();
  return {};
}

std::string FinalExchange::replica(std::size_t from, net::Payload&& payload) {
  GRADMESH_CHECK(from < nodes_, "FinalExchange::replica: a rank of the job");
  if (payload.size() != floats_ * sizeof(float)) {
    return "a replica of " + std::to_string(payload.size()) + " bytes (expected " +
           std::to_string(floats_ * sizeof(float)) + ")";
  }
  {
    const std::lock_guard lock(mutex_);
    if (replicas_[from]) return "a second replica";
    replicas_[from] = std::move(payload);
  }
  changed_.notify_all();
  return {};
}

void FinalExchange::reset(std::size_t peer) {
  const std::lock_guard lock(mutex_);
  done_.at(peer) = 0;
  replicas_.at(peer).reset();
}

std::size_t FinalExchange::pending_locked(const Live& live) const {
  std::size_t pending = 0;
  for (std::size_t r = 0; r < nodes_; ++r) {
    if (r != rank_ && done_[r] == 0 && live(r)) ++pending;
  }
  return pending;
}

std::size_t FinalExchange::pending(const Live& live) {
  const std::lock_guard lock(mutex_);
  return pending_locked(live);
}

bool FinalExchange::await_done(Clock::time_point deadline, const Live& live) {
  std::unique_lock lock(mutex_);
  return changed_.wait_until(lock, deadline, [&] { return pending_locked(live) == 0; });
}

std::size_t FinalExchange::average_survivors(std::span<float> replica, Clock::time_point deadline,
                                             const Live& live) {
  GRADMESH_CHECK(replica.size() == floats_, "FinalExchange::average_survivors: m floats");
  std::unique_lock lock(mutex_);
  (void)changed_.wait_until(lock, deadline, [&] {
    for (std::size_t r = 0; r < nodes_; ++r) {
      if (r != rank_ && live(r) && !replicas_[r]) return false;
    }
    return true;
  });
  // Rank order, this node's own in its place: the same sum on every survivor that got the same.
  std::vector<float> sum(floats_, 0.0f);  // once per job
  std::size_t count = 0;
  for (std::size_t r = 0; r < nodes_; ++r) {
    const float* values = r == rank_     ? replica.data()
                          : replicas_[r] ? replicas_[r]->as<float>().data()
                                         : nullptr;
    if (values == nullptr) continue;
    for (std::size_t i = 0; i < floats_; ++i) sum[i] += values[i];
    ++count;
  }
  lock.unlock();
  const float scale = 1.0f / static_cast<float>(count);
  for (std::size_t i = 0; i < floats_; ++i) replica[i] = sum[i] * scale;
  return count;
}

void FinalExchange::notify() {
  { const std::lock_guard lock(mutex_); }  // a waiter between its check and its wait sees it
  changed_.notify_all();
}

void FinalExchange::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  (void)changed_.wait_for(lock, timeout);
}

}  // namespace gradmesh::sync::ako
