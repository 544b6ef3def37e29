#include "sync/ako/staleness_clocks.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "engine/error.h"

namespace gradmesh::sync::ako {

StalenessClocks::StalenessClocks(std::size_t nodes, std::size_t self)
    : clocks_(nodes, 0), dropped_(nodes, 0), self_(self) {
  GRADMESH_CHECK(nodes >= 1, "StalenessClocks needs at least one node");
  GRADMESH_CHECK_LT(self, nodes, "StalenessClocks: own rank outside the peer list");
}

bool StalenessClocks::holds_locked(std::uint64_t local_clock) const {
  if (!slack_) return false;
  std::uint64_t slowest = std::numeric_limits<std::uint64_t>::max();
  for (std::size_t i = 0; i < clocks_.size(); ++i) {
    if (i != self_ && dropped_[i] == 0) slowest = std::min(slowest, clocks_[i]);
  }
  if (slowest == std::numeric_limits<std::uint64_t>::max()) return true;  // no peers
  return local_clock <= slowest + *slack_;
}

collective::Settlement StalenessClocks::take_ready_locked() {
  if (!gate_.waiting() || !holds_locked(pending_clock_)) return {};
  return gate_.release();
}

void StalenessClocks::set_slack(std::uint64_t slack) {
  collective::Settlement ready;
  {
    const std::lock_guard lock(mutex_);
    slack_ = slack;
    ready = take_ready_locked();
  }
  std::move(ready).run();  // outside the lock: completing schedules the gate's successors
}

void StalenessClocks::advance(std::size_t peer, std::uint64_t clock) {
  GRADMESH_CHECK_LT(peer, clocks_.size(), "StalenessClocks::advance: rank outside the peer list");
  GRADMESH_CHECK(peer != self_, "StalenessClocks::advance on this node's own rank");
  collective::Settlement ready;
  {
    const std::lock_guard lock(mutex_);
    clocks_[peer] = std::max(clocks_[peer], clock);
    ready = take_ready_locked();
  }
  std::move(ready).run();
}

void StalenessClocks::await(std::uint64_t local_clock, engine::Completion gate) {
  collective::Settlement settled;
  {
    const std::lock_guard lock(mutex_);
    GRADMESH_CHECK(!gate_.waiting(), "StalenessClocks::await while another await is pending");
    const bool holds = holds_locked(local_clock);
    settled = gate_.wait(std::move(gate), holds);
    if (gate_.waiting()) {
      pending_clock_ = local_clock;
      ++waits_;
    }
  }
  std::move(settled).run();
}

void StalenessClocks::fail_all(std::exception_ptr error) {
  collective::Settlement failed;
  {
    const std::lock_guard lock(mutex_);
    failed = gate_.fail(std::move(error));
  }
  std::move(failed).run();
}

void StalenessClocks::drop(std::size_t peer) {
  GRADMESH_CHECK_LT(peer, clocks_.size(), "StalenessClocks::drop: rank outside the peer list");
  GRADMESH_CHECK(peer != self_, "StalenessClocks::drop on this node's own rank");
  collective::Settlement ready;
  {
    const std::lock_guard lock(mutex_);
    dropped_[peer] = 1;
    ready = take_ready_locked();
  }
  std::move(ready).run();
}

void StalenessClocks::readmit(std::size_t peer, std::uint64_t clock) {
  GRADMESH_CHECK_LT(peer, clocks_.size(), "StalenessClocks::readmit: rank outside the peer list");
  GRADMESH_CHECK(peer != self_, "StalenessClocks::readmit on this node's own rank");
  const std::lock_guard lock(mutex_);
  if (dropped_[peer] == 0) return;
  dropped_[peer] = 0;
  clocks_[peer] = clock;
}

std::uint64_t StalenessClocks::clock(std::size_t peer) const {
  const std::lock_guard lock(mutex_);
  GRADMESH_CHECK_LT(peer, clocks_.size(), "StalenessClocks::clock: rank outside the peer list");
  return clocks_[peer];
}

std::optional<std::uint64_t> StalenessClocks::slowest() const {
  const std::lock_guard lock(mutex_);
  std::optional<std::uint64_t> result;
  for (std::size_t i = 0; i < clocks_.size(); ++i) {
    if (i != self_ && dropped_[i] == 0) result = std::min(result.value_or(clocks_[i]), clocks_[i]);
  }
  return result;
}

bool StalenessClocks::blocked() const {
  const std::lock_guard lock(mutex_);
  return gate_.waiting();
}

std::uint64_t StalenessClocks::waits() const {
  const std::lock_guard lock(mutex_);
  return waits_;
}

}  // namespace gradmesh::sync::ako
