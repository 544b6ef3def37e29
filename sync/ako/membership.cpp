#include "sync/ako/membership.h"

#include <vector>

#include "engine/error.h"

namespace gradmesh::sync::ako {

Membership::Membership(std::size_t rank, std::size_t nodes, std::optional<std::size_t> min_nodes)
    : rank_(rank),
      nodes_(nodes),
      quorum_{nodes, min_nodes},
      dead_(new std::atomic<bool>[nodes]),
      live_(nodes) {
  GRADMESH_CHECK(rank < nodes, "Membership: rank < nodes");
  for (std::size_t r = 0; r < nodes; ++r) dead_[r].store(false, std::memory_order_relaxed);
}

std::optional<Membership::Dropped> Membership::drop(std::size_t peer) {
  if (peer >= nodes_ || peer == rank_) return std::nullopt;
  if (dead_[peer].exchange(true, std::memory_order_acq_rel)) return std::nullopt;
  failures_.fetch_add(1, std::memory_order_relaxed);
  const std::size_t live = live_.fetch_sub(1, std::memory_order_acq_rel) - 1;
  return Dropped{live, quorum_.holds(live)};
}

std::optional<std::size_t> Membership::take_back(std::size_t peer) {
  if (peer >= nodes_ || peer == rank_) return std::nullopt;
  if (!dead_[peer].exchange(false, std::memory_order_acq_rel)) return std::nullopt;
  rejoins_.fetch_add(1, std::memory_order_relaxed);
  return live_.fetch_add(1, std::memory_order_acq_rel) + 1;
}

std::optional<std::string> Membership::cut_off(
    const std::function<std::string(std::size_t rank)>& address, const std::string& last) {
  std::vector<std::string> lost;
  for (std::size_t r = 0; r < nodes_; ++r) {
    if (r != rank_ && dead(r))
      lost.push_back("rank " + std::to_string(r) + " (" + address(r) + ")");
  }
  std::string why = quorum_.cut_off_message(lost, last);
  const std::lock_guard lock(mutex_);
  if (cut_off_) return std::nullopt;
  cut_off_ = std::make_exception_ptr(CutOffError(why));
  return why;
}

void Membership::check() const {
  const std::lock_guard lock(mutex_);
  if (cut_off_) std::rethrow_exception(cut_off_);
}

}  // namespace gradmesh::sync::ako
