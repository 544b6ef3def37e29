#include "sync/ako/round_sender.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "engine/executor.h"

namespace gradmesh::sync::ako {

RoundSender::RoundSender(std::size_t rank, std::size_t nodes, std::size_t floats, Lanes lanes,
                         std::size_t rounds_in_flight, engine::Executor& executor,
                         LaneRouter& router, const PartitionAgreement& agreement,
                         const Membership& membership, HandoffRing& handoff,
                         FailureHandler on_failure, std::function<void()> after_pump)
    : rank_(rank),
      nodes_(nodes),
      floats_(floats),
      lanes_(lanes),
      rounds_in_flight_(rounds_in_flight),
      executor_(executor),
      router_(router),
      agreement_(agreement),
      membership_(membership),
      handoff_(handoff),
      on_failure_(std::move(on_failure)),
      after_pump_(std::move(after_pump)),
      partition_frame_overhead_(
          frame_overhead_bytes(lanes.partition, static_cast<std::uint16_t>(Kind::kPartition))),
      links_(nodes),
      round_payload_(nodes, 0.0),
      meter_(nodes) {
  if (nodes < 2 || rounds_in_flight == 0) {
    throw ContractError("ako::RoundSender: needs nodes >= 2 and rounds_in_flight >= 1");
  }
}

RoundSender::~RoundSender() {
  stopped_.store(true);
  const std::lock_guard lock(mutex_);
  if (pool_) pool_->set_on_release({});
}

void RoundSender::post() {
  if (stopped_.load(std::memory_order_acquire)) return;
  if (posted_.exchange(true, std::memory_order_acq_rel)) return;
  executor_.post(engine::Arena::kNetwork, [this] { pump(); });
}

void RoundSender::stop(bool send_undelivered) {
  const std::lock_guard lock(mutex_);
  if (send_undelivered && !stopped_.load(std::memory_order_acquire) && queue_ &&
      phase_ != Phase::kWarmup) {
    this->send_undelivered(folded_);
  }
  stopped_.store(true, std::memory_order_release);
  if (pool_) pool_->set_on_release({});
}

void RoundSender::set_clock(std::uint64_t clock) {
  const std::lock_guard lock(mutex_);
  folded_ = clock;
  sent_clock_.store(clock);
}

void RoundSender::pause(bool paused, Clock::time_point now) { meter_.pause(paused, now); }

SendRateMeter::Figures RoundSender::measured() const { return meter_.figures(); }

void RoundSender::pump() {
  {
    const std::lock_guard lock(mutex_);
    posted_.store(false, std::memory_order_release);  // a later handoff posts again
    if (stopped_.load(std::memory_order_acquire)) return;
    const std::size_t agreed = agreement_.agreed();
    const auto phase_after = [&](std::size_t plans) {
      return plans == agreement_.plans_needed() ? Phase::kSteady : Phase::kProbe;
    };
    if (!queue_) {  // the first pump: warm-up, or straight to an agreed (explicit) p
      if (agreed == 0) {
        start_phase(Phase::kWarmup, 1);
      } else {
        start_phase(phase_after(agreed), agreed - 1);
      }
    }
    if (phase_ == Phase::kWarmup && agreed >= 1) {
      // Every warm-up round delivered its gradients whole (p = 1): the ring at p starts empty, and
      // the gradients folded since the last warm-up round, never sent, open its first round.
      const std::unique_ptr<AccumulationQueue> warm = std::move(queue_);
      start_phase(phase_after(agreed), agreed - 1);
      if (warm->pending() > 0) queue_->add(warm->accumulated());  // p = 1: g* = the unsent ones
    }
    if (phase_ == Phase::kProbe && agreed == PartitionAgreement::kPlans) {
      if (!same_links(1)) {
        // Each peer gets, whole, what it lacks of this node's gradients; then a fresh ring at p.
        send_undelivered(folded_);
        sent_clock_.store(folded_, std::memory_order_release);
        start_phase(Phase::kSteady, 1);
      } else {
        phase_ = Phase::kSteady;  // the probe confirmed p1: keep the ring
      }
    }
    // A peer that rejoined but had no link in the plan (it died before the plan was agreed)
    // gets one at the ring's p: its ranges fit the send buffers, and g* is its window.
    if (phase_ != Phase::kWarmup) {
      for (std::size_t peer = 0; peer < nodes_; ++peer) {
        if (peer != rank_ && !dead(peer) && !links_[peer])
          links_[peer].emplace(floats_, queue_->partitions());
      }
    }
    // One round per handed-off slot (a slot holds several gradients only if the ring filled up).
    // In warm-up every slot folds into the open round, which goes out when the previous warm-up
    // round has been written (one in flight: the transport's send cap paces them).
    const bool warmup = phase_ == Phase::kWarmup;
    // When the send buffers are all in flight the network is behind (bandwidth-bound): every
    // waiting gradient folds into the open round at once (sec. 4.2), so none waits in the ring
    // and goes out later, staler. (Queueing them instead made 8 nodes at p = 24 diverge.)
    bool behind = false;
    // At most a ring's worth of slots per call, then the pump posts itself again: with compute
    // faster than the rounds (a full ring folds into its newest slot, so compute never waits),
    // an unbounded loop held the serialised network arena for good, and the jobs queued behind
    // it (this node's gamma profile broadcast) never ran.
    std::size_t claimed = 0;
    bool more = false;
    while (true) {
      if (!warmup && !behind && queue_->pending() > 0) {
        if (have_buffers(nodes_ - 1)) {
          send_round(folded_);  // round tag = c_j of the round's last gradient
          sent_clock_.store(folded_, std::memory_order_release);
        } else {
          behind = true;  // a returning buffer posts the pump, which sends the open round
        }
      }
      if (claimed == handoff_.slots()) {
        more = true;
        break;
      }
      const auto slot = handoff_.claim();
      if (!slot) break;
      queue_->add(slot->gradient);
      folded_ += slot->count;
      handoff_.release();
      ++claimed;
    }
    if (more) post();
    if (warmup && queue_->pending() > 0 && have_buffers(1)) {
      send_warmup_round(folded_);
      sent_clock_.store(folded_, std::memory_order_release);
    }
  }
  if (after_pump_) after_pump_();
}

bool RoundSender::same_links(std::size_t plan) const {
  for (std::size_t peer = 0; peer < nodes_; ++peer) {
    if (peer == rank_ || dead(peer)) continue;
    const std::size_t now = links_[peer] ? links_[peer]->partitions() : 0;
    if (now != agreement_.link_partitions(plan, peer)) return false;
  }
  return true;
}

bool RoundSender::have_buffers(std::size_t buffers) {
  if (pool_->available() >= buffers) {
    waiting_for_buffers_.store(false, std::memory_order_release);
    return true;
  }
  // Sec. 4.2: the network is behind; handed-off gradients fold into the open round. A returning
  // buffer posts the pump again, which sends it.
  waiting_for_buffers_.store(true, std::memory_order_release);
  if (pool_->available() >= buffers) post();  // one came back meanwhile
  return false;
}

void RoundSender::start_phase(Phase phase, std::size_t plan) {
  // Once per phase (at most three per job): the ring and the send buffers, allocated up front.
  if (pool_) pool_->set_on_release({});  // its buffers still in the transport return to it
  pool_.reset();
  queue_.reset();
  phase_ = phase;
  for (auto& link : links_) link.reset();
  if (phase == Phase::kWarmup) {
    queue_ = std::make_unique<AccumulationQueue>(floats_, 1);
    // One m-float buffer per round; one round in flight, so the switch to p finds at most one
    // warm-up round still to be written (AkoStage's settle time).
    pool_ = std::make_unique<PayloadPool>(1, floats_);
  } else {
    // The ring holds the most partitions any link has; a buffer, the largest range of any link.
    std::size_t ring = 1, range_floats = 1;
    for (std::size_t peer = 0; peer < nodes_; ++peer) {
      const std::size_t p = agreement_.link_partitions(plan, peer);
      if (p == 0) continue;  // this node, or a peer dead when the plan was agreed
      links_[peer].emplace(floats_, p);
      ring = std::max(ring, p);
      range_floats = std::max(range_floats, links_[peer]->max_range_floats());
    }
    queue_ = std::make_unique<AccumulationQueue>(floats_, ring);
    pool_ = std::make_unique<PayloadPool>(rounds_in_flight_ * (nodes_ - 1), range_floats);
  }
  pool_->set_on_release([this] {
    if (waiting_for_buffers_.load(std::memory_order_acquire)) post();
  });
}

void RoundSender::send_warmup_round(std::uint64_t t) {
  PayloadPool::Lease lease = pool_->acquire();
  const std::span<const float> accumulated = queue_->accumulated();
  std::memcpy(lease.data().data(), accumulated.data(), accumulated.size_bytes());
  // One payload, shared by every peer's frame.
  broadcast(lanes_.full_round, Kind::kFullRound, 0, t, lease.payload(floats_));
  queue_->advance();
  rounds_sent_.fetch_add(1, std::memory_order_relaxed);
  full_rounds_.fetch_add(1, std::memory_order_relaxed);
}

void RoundSender::send_round(std::uint64_t t) {
  const std::uint64_t rotation = queue_->round();  // ako::undelivered() assumes this rotation
  const bool steady = phase_ == Phase::kSteady && !flushing_.load(std::memory_order_acquire);
  double wire = 0;
  std::fill(round_payload_.begin(), round_payload_.end(), 0.0);
  for (std::size_t peer = 0; peer < nodes_; ++peer) {
    if (peer == rank_ || dead(peer) || !links_[peer]) continue;
    const RangePartition& link = *links_[peer];
    const std::size_t p = link.partitions();
    const std::size_t k = link.range_for(peer, rotation);
    const Range r = link.range(k);
    PayloadPool::Lease lease = pool_->acquire();
    // The sum of the link's last p round gradients over range k (g*_r when p is the ring's).
    queue_->window_sum(r, p, lease.data().first(r.size));
    wire += static_cast<double>(r.size * sizeof(float)) + partition_frame_overhead_;
    round_payload_[peer] = static_cast<double>(r.size * sizeof(float));
    const std::uint64_t key = (static_cast<std::uint64_t>(p) << kPartitionShift) | k;
    send_to(peer, lanes_.partition, Kind::kPartition, key, t, lease.payload(r.size));
  }
  queue_->advance();
  rounds_sent_.fetch_add(1, std::memory_order_relaxed);
  if (steady) meter_.round(Clock::now(), t, wire, round_payload_);
}

void RoundSender::send_undelivered(std::uint64_t t) {
  // Once or twice per job (a switch of p, the end): allocates one m-float payload per peer.
  for (std::size_t peer = 0; peer < nodes_; ++peer) {
    if (peer == rank_ || dead(peer) || !links_[peer]) continue;
    net::Payload payload = net::Payload::allocate(floats_ * sizeof(float));
    const std::span<std::byte> bytes = payload.mutable_bytes();
    undelivered(*queue_, *links_[peer], peer,
                std::span<float>(reinterpret_cast<float*>(bytes.data()), floats_));
    send_to(peer, lanes_.full_round, Kind::kFullRound, 0, t, std::move(payload));
  }
  rounds_sent_.fetch_add(1, std::memory_order_relaxed);
  full_rounds_.fetch_add(1, std::memory_order_relaxed);
}

void RoundSender::send_to(std::size_t peer, LaneId lane, Kind kind, std::uint64_t key,
                          std::uint64_t round, net::Payload payload) {
  if (auto error = router_.send(peer, net::Message{lane, static_cast<std::uint16_t>(kind), key,
                                                   round, std::move(payload)})) {
    on_failure_(*error);  // drops the peer (sec. 4.3)
  }
}

void RoundSender::broadcast(LaneId lane, Kind kind, std::uint64_t key, std::uint64_t round,
                            const net::Payload& payload) {
  for (std::size_t peer = 0; peer < nodes_; ++peer) {
    if (peer != rank_ && !dead(peer)) send_to(peer, lane, kind, key, round, payload);
  }
}

}  // namespace gradmesh::sync::ako
