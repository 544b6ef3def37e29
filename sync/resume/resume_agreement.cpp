#include "sync/resume/resume_agreement.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace gradmesh::sync {

namespace {

/// Rounds whose lists may wait for this node's exchange() at once.
constexpr std::size_t kMaxPendingRounds = 4;

std::string list_text(const std::vector<std::uint64_t>& iterations) {
  if (iterations.empty()) return "none";
  std::string out;
  for (const std::uint64_t i : iterations) out += (out.empty() ? "" : ", ") + std::to_string(i);
  return out;
}

}  // namespace

ResumeAgreement::ResumeAgreement(Channel& channel, double timeout_s)
    : channel_(channel), timeout_(timeout_s) {
  GRADMESH_CHECK(timeout_s > 0, "ResumeAgreement: timeout " + std::to_string(timeout_s) + " s");
  stage_ = channel_.route(kResumeStage, [this](std::size_t from, net::Message&& message) {
    on_message(from, std::move(message));
  });
  channel_.on_failure([this](const PeerError& error) {
    {
      const std::lock_guard lock(mutex_);
      if (!failure_) failure_ = error;
    }
    changed_.notify_all();
  });
}

void ResumeAgreement::on_message(std::size_t from, net::Message&& message) {
  const std::size_t bytes = message.payload.size();
  if (bytes % sizeof(std::uint64_t) != 0 || bytes / sizeof(std::uint64_t) != message.key) {
    channel_.reject(from, stage_,
                    "a list of " + std::to_string(message.key) + " iterations in " +
                        std::to_string(bytes) + " bytes");
    return;
  }
  std::vector<std::uint64_t> iterations(message.key);
  if (bytes > 0) std::memcpy(iterations.data(), message.payload.bytes().data(), bytes);
  {
    const std::lock_guard lock(mutex_);
    if (finished_ && message.round <= *finished_) {
      channel_.reject(from, stage_, "a list of round " + std::to_string(message.round) +
                                        ", finished already");
      return;
    }
    // A peer is at most a round or two ahead of this node; lists of many rounds to come are a
    // misbehaving peer's, and would only take memory.
    if (!received_.contains(message.round) && received_.size() >= kMaxPendingRounds) {
      channel_.reject(from, stage_,
                      "a list of round " + std::to_string(message.round) + " while " +
                          std::to_string(received_.size()) + " rounds wait already");
      return;
    }
    auto& lists = received_[message.round];
    lists.resize(channel_.nodes());
    if (lists[from]) {
      channel_.reject(from, stage_,
                      "a second list of round " + std::to_string(message.round));
      return;
    }
    lists[from] = std::move(iterations);
  }
  changed_.notify_all();
}

std::vector<std::vector<std::uint64_t>> ResumeAgreement::exchange(
    std::span<const std::uint64_t> valid, std::uint64_t round) {
  const std::size_t n = channel_.nodes(), me = channel_.rank();
  std::vector<std::vector<std::uint64_t>> lists(n);
  lists[me].assign(valid.begin(), valid.end());
  {
    const std::lock_guard lock(mutex_);
    GRADMESH_CHECK(!started_ || round > *started_,
                   "ResumeAgreement::exchange: round " + std::to_string(round) +
                       " after round " + std::to_string(started_.value_or(0)));
    started_ = round;
  }
  if (n == 1) return lists;
  const net::Payload payload = net::Payload::copy_of(std::as_bytes(valid));
  throw_first(channel_.broadcast(net::Message{stage_, 0, valid.size(), round, payload, 0}));
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout_);
  std::unique_lock lock(mutex_);
  auto& in = received_[round];  // std::map: the reference outlives other rounds' insertions
  in.resize(n);
  for (;;) {
    std::size_t missing = n;
    for (std::size_t peer = 0; peer < n && missing == n; ++peer) {
      if (peer != me && !in[peer]) missing = peer;
    }
    // Every list in: done, even if a peer has failed since (it may have stopped right after
    // sending, on an error of its own that this node is about to find too).
    if (missing == n) break;
    if (failure_) throw *failure_;
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      throw PeerError(missing, channel_.address(missing),
                      round == 0 ? "sent no list of its checkpoints within " +
                                       std::to_string(timeout_.count()) +
                                       " s (is it resuming too?)"
                                 : "sent no list of the join requests it has seen at the "
                                   "checkpoint boundary of iteration " +
                                       std::to_string(round) + " within " +
                                       std::to_string(timeout_.count()) + " s");
    }
  }
  for (std::size_t peer = 0; peer < n; ++peer) {
    if (peer != me) lists[peer] = std::move(*in[peer]);
  }
  received_.erase(round);
  finished_ = round;
  return lists;
}

std::uint64_t ResumeAgreement::newest_common(const std::vector<std::vector<std::uint64_t>>& lists) {
  GRADMESH_CHECK(!lists.empty(), "ResumeAgreement::newest_common: no lists");
  std::vector<std::uint64_t> common = lists[0];
  std::sort(common.begin(), common.end());
  for (std::size_t r = 1; r < lists.size(); ++r) {
    std::vector<std::uint64_t> other = lists[r];
    std::sort(other.begin(), other.end());
    std::vector<std::uint64_t> both;
    std::set_intersection(common.begin(), common.end(), other.begin(), other.end(),
                          std::back_inserter(both));
    common = std::move(both);
  }
  if (common.empty()) {
    std::string what;
    for (std::size_t r = 0; r < lists.size(); ++r) {
      what += (r ? "; rank " : "rank ") + std::to_string(r) + ": " + list_text(lists[r]);
    }
    throw CheckpointError("no checkpoint iteration is valid on every node (" + what + ")");
  }
  return common.back();
}

}  // namespace gradmesh::sync
