#include "sync/collective/all_gather.h"

namespace gradmesh::sync::collective {

AllGather::AllGather(LaneRouter& router, LaneId lane, std::uint16_t kind,
                     std::size_t max_payload_bytes, std::size_t max_pending_rounds,
                     std::uint32_t priority)
    : router_(router),
      lane_(lane),
      kind_(kind),
      max_payload_(max_payload_bytes),
      max_pending_(max_pending_rounds),
      priority_(priority) {
  GRADMESH_CHECK_GT(max_pending_rounds, std::size_t{0}, "AllGather: max_pending_rounds");
}

AllGather::Round& AllGather::round_locked(std::uint64_t round) {
  auto [it, added] = rounds_.try_emplace(round);
  if (added) {
    it->second.payloads.resize(router_.nodes());
    it->second.missing = router_.nodes();
    // A round opened after fail(): its await() fails at once.
    if (failure_) it->second.done.fail(std::make_exception_ptr(*failure_)).run();
  }
  return it->second;
}

void AllGather::start(std::uint64_t round, net::Payload payload) {
  collective::Settlement settled;
  {
    const std::lock_guard lock(mutex_);
    GRADMESH_CHECK(!started_ || round > *started_, "AllGather::start: round " +
                                                       std::to_string(round) + " after round " +
                                                       std::to_string(started_.value_or(0)));
    if (failure_) throw *failure_;
    started_ = round;
    Round& r = round_locked(round);
    r.payloads[router_.rank()] = payload;
    if (--r.missing == 0) settled = r.done.release();
  }
  if (router_.nodes() > 1) {
    throw_first(
        router_.broadcast(net::Message{lane_, kind_, 0, round, std::move(payload), priority_}));
  }
  std::move(settled).run();
}

std::vector<net::Payload> AllGather::finish_locked(std::uint64_t round) {
  auto it = rounds_.find(round);
  std::vector<net::Payload> out;
  out.reserve(it->second.payloads.size());
  for (auto& p : it->second.payloads) out.push_back(std::move(*p));
  rounds_.erase(it);
  finished_ = round;
  return out;
}

std::vector<net::Payload> AllGather::wait(
    std::uint64_t round, double timeout_s,
    const std::function<std::string(std::size_t rank)>& timeout_text) {
  GRADMESH_CHECK(timeout_s > 0, "AllGather::wait: timeout " + std::to_string(timeout_s) + " s");
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  std::unique_lock lock(mutex_);
  GRADMESH_CHECK(started_ && *started_ == round,
                 "AllGather::wait of round " + std::to_string(round) + " before its start()");
  for (;;) {
    Round& r = round_locked(round);
    if (r.missing == 0) return finish_locked(round);
    if (failure_) throw *failure_;
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      Round& late = round_locked(round);
      if (late.missing == 0) return finish_locked(round);
      if (failure_) throw *failure_;
      std::size_t rank = 0;
      while (late.payloads[rank]) ++rank;
      throw PeerError(rank, router_.address(rank), timeout_text(rank));
    }
  }
}

void AllGather::await(std::uint64_t round, engine::Completion done) {
  collective::Settlement settled;
  {
    const std::lock_guard lock(mutex_);
    GRADMESH_CHECK(started_ && *started_ == round,
                   "AllGather::await of round " + std::to_string(round) + " before its start()");
    Round& r = round_locked(round);
    settled = r.done.wait(std::move(done), r.missing == 0);
  }
  std::move(settled).run();
}

std::vector<net::Payload> AllGather::take(std::uint64_t round) {
  const std::lock_guard lock(mutex_);
  const auto it = rounds_.find(round);
  GRADMESH_CHECK(it != rounds_.end() && it->second.missing == 0,
                 "AllGather::take of round " + std::to_string(round) + " before it completed");
  return finish_locked(round);
}

void AllGather::on_message(std::size_t from, net::Message&& message) {
  collective::Settlement settled;
  {
    const std::lock_guard lock(mutex_);
    const std::uint64_t round = message.round;
    if (from >= router_.nodes() || from == router_.rank()) {
      return reject(from, "a payload from rank " + std::to_string(from));
    }
    if (message.key != 0) return reject(from, "key " + std::to_string(message.key) + ", not 0");
    if (message.payload.size() > max_payload_) {
      return reject(from, "a payload of " + std::to_string(message.payload.size()) +
                              " bytes, at most " + std::to_string(max_payload_) + " expected");
    }
    if (finished_ && round <= *finished_) {
      return reject(from, "a payload of round " + std::to_string(round) + ", over already");
    }
    // A peer is at most a round or two ahead of this node; many rounds to come are a misbehaving
    // peer's, and would only take memory.
    if (!rounds_.contains(round) && rounds_.size() >= max_pending_) {
      return reject(from, "a payload of round " + std::to_string(round) + " while " +
                              std::to_string(rounds_.size()) + " rounds wait already");
    }
    Round& r = round_locked(round);
    if (r.payloads[from]) {
      return reject(from, "a second payload of round " + std::to_string(round));
    }
    r.payloads[from] = std::move(message.payload);
    if (--r.missing == 0) settled = r.done.release();
  }
  changed_.notify_all();
  std::move(settled).run();
}

void AllGather::fail(const PeerError& error) {
  std::vector<collective::Settlement> failed;
  {
    const std::lock_guard lock(mutex_);
    if (!failure_) failure_ = error;
    const auto stored = std::make_exception_ptr(*failure_);
    for (auto& [round, r] : rounds_) failed.push_back(r.done.fail(stored));
  }
  changed_.notify_all();
  for (collective::Settlement& s : failed) std::move(s).run();
}

std::uint64_t AllGather::rejected() const {
  const std::lock_guard lock(mutex_);
  return rejected_;
}

void AllGather::reject(std::size_t from, const std::string& why) {
  ++rejected_;  // under mutex_
  router_.reject(from, lane_, why);
}

void Barrier::arrive_and_wait(std::uint64_t round, double timeout_s,
                              const std::function<std::string(std::size_t rank)>& timeout_text) {
  gather_.start(round, net::Payload{});
  (void)gather_.wait(round, timeout_s, timeout_text);
}

}  // namespace gradmesh::sync::collective
