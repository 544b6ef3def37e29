// AkoStage: a restarted node rejoins the running job (Ako SoCC'16 sec. 4.3): the donor's replica
// and plan for it, its peers taking it back into their clocks and sends.
#include "sync/ako/ako_internal.h"

#include <cmath>
#include <cstring>

namespace gradmesh::sync {

using namespace ako_internal;

namespace {

// The peer a rejoining node takes its state from: the lowest other rank (every peer is live: the
// rejoining node's start() connected to each).
std::size_t donor_of(std::size_t rank) noexcept { return rank == 0 ? 1 : 0; }

}  // namespace

std::uint64_t AkoStage::join() {
  GRADMESH_CHECK(ctx_.rejoin, "AkoStage::join without SyncContext::rejoin");
  if (ctx_.nodes == 1) return 0;
  const std::size_t donor = donor_of(ctx_.rank);
  spdlog::info("ako: rejoining: asking rank {} for its replica, clock and p", donor);
  // To every peer: this node's lanes are routed now, send to it again (key 1: and you, the donor,
  // send your replica).
  for (std::size_t r = 0; r < ctx_.nodes; ++r) {
    if (r != ctx_.rank)
      sender_->send_to(r, control_lane_, ako::Kind::kJoinRequest, r == donor, 0, {});
  }
  net::Message state;
  {
    const double wait_s =
        network_wait_seconds(static_cast<double>(floats_ * sizeof(float)), kJoinTimeoutSeconds);
    std::optional<net::Message> answer =
        joins_.await(std::chrono::duration<double>(wait_s), [&] { return dead(donor); });
    if (!answer) {
      throw Error("ako: rank " + std::to_string(donor) + " (" + router_.address(donor) + ")" +
                  (dead(donor) ? " failed"
                               : " sent no replica within " +
                                     std::to_string(static_cast<int>(wait_s)) + " s") +
                  " before this node could rejoin; start it again to rejoin through another peer");
    }
    state = std::move(*answer);
  }
  const ako::JoinState join = joins_.decode(state);
  const std::uint64_t clock = join.clock;
  const std::size_t p1 = join.p1;
  const std::size_t p = join.partitions;
  // Nothing runs yet: the replica is this node's to overwrite.
  std::memcpy(ctx_.model.parameters().data(), join.replica.data(), join.replica.size());
  const double donor_bandwidth = join.bandwidth;
  // The donor's B (the job's slowest link, measured or configured) stands in for the probe this
  // node skipped: it bounds this node's waits and how long one frame may hold a link, unless
  // this node has a rate of its own (a send cap, sync.ako.bandwidth, planner.bandwidth).
  if (bandwidth_ <= 0) bandwidth_ = donor_bandwidth;
  link_bandwidth_ = ctx_.options.planner.bandwidth.value_or(donor_bandwidth);
  if (!ctx_.options.planner.bandwidth && donor_bandwidth > 0) {
    std::vector<double> rates(ctx_.nodes, donor_bandwidth);
    rates[ctx_.rank] = 0;
    router_.set_link_rates(std::move(rates));
  }
  local_clock_.store(clock);
  sender_->set_clock(clock);
  // The peers are where the donor is, within the staleness bound: start their clocks there, so
  // the first gate does not wait for a round from each.
  for (std::size_t r = 0; r < ctx_.nodes; ++r) {
    if (r != ctx_.rank) clocks_.advance(r, clock);
  }
  if (auto_partitions_) {
    agreement_->adopt(p1, p);
    agree(0, p1, static_cast<double>(p1));
    agree(1, p, static_cast<double>(p));
  }
  rejoined_ = true;
  spdlog::warn(
      "ako: rejoined from rank {}'s replica at its clock {} (p = {}, B = {:.0f} bytes/s); "
      "the peers take this node back into their staleness clocks (Ako SoCC'16 sec. 4.3)",
      donor, clock, p, donor_bandwidth);
  return clock;
}

void AkoStage::record_join_state(std::size_t from, net::Message&& message) {
  if (!ctx_.rejoin || from != donor_of(ctx_.rank)) {
    reject(from, "a replica to rejoin with, which this node did not ask for");
    return;
  }
  const std::string refused = joins_.offer(std::move(message));
  if (!refused.empty()) reject(from, refused);
}

void AkoStage::donate_replica() {
  // The plan must be agreed: the joiner takes p from it and does not profile.
  const std::size_t needed = plans_needed();
  if (agreement_->agreed() < needed) return;  // a later iteration answers
  const std::vector<std::size_t> requests = joins_.take_requests();
  const std::uint64_t key =
      ako::JoinExchange::key(agreement_->partitions(0), agreement_->partitions(needed - 1));
  const std::uint64_t clock = local_clock_.load();
  for (const std::size_t peer : requests) {
    if (dead(peer)) continue;
    // The replica, then B (bytes/s, 0: unknown): the joiner skipped the probe. Once per rejoin.
    sender_->send_to(peer, control_lane_, ako::Kind::kJoinState, key, clock,
                     joins_.encode(ctx_.model.parameters(), link_bandwidth_));
    spdlog::info("ako: sent rank {} this node's replica at clock {} to rejoin with", peer, clock);
  }
}

void AkoStage::on_rejoin(std::size_t peer) {
  spdlog::info(
      "ako: rank {} reconnected; it comes back into the exchange when its stage asks "
      "(a join request)",
      peer);
}

void AkoStage::take_back(std::size_t peer) {
  if (peer >= ctx_.nodes || peer == ctx_.rank || !dead(peer)) {
    spdlog::warn("ako: rank {} asks to rejoin, but it was not dropped here; nothing to do", peer);
    return;
  }
  // Its rounds start again from its donor's clock, and its clock comes back with its first
  // round: until then it holds no one back, or its donor, gated on it, would never reach the
  // iteration boundary that answers it.
  receiver_.readmit(peer);
  end_.reset(peer);
  const std::size_t live = membership_.take_back(peer).value_or(membership_.live());
  spdlog::warn(
      "ako: rank {} restarted and rejoined: back in the staleness clocks and the rounds, "
      "{} of {} nodes live (Ako SoCC'16 sec. 4.3)",
      peer, live, ctx_.nodes);
  post_pump();
}

}  // namespace gradmesh::sync
