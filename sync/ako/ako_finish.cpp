// AkoStage: the end-of-job exchange, pauses, the measured send rate, summary and plan.
#include "sync/ako/ako_internal.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "engine/executor.h"
#include "sync/layer_plan.h"
#include "sync/replica_average.h"

namespace gradmesh::sync {

using namespace ako_internal;

// ====================================================================== end of job

double AkoStage::network_wait_seconds(double bytes, double fixed) const noexcept {
  return bandwidth_ > 0 ? fixed + bytes / bandwidth_ : fixed;
}

bool AkoStage::finish() {
  if (ctx_.nodes == 1 || !router_.connected()) return false;
  check_quorum();  // a node cut off from the job does not wait for its peers' last rounds
  // Profiles the job ended too early to complete: every node's gamma is needed for every plan.
  while (profiles_sent_ < plans_needed()) end_profile(profiles_sent_, profile_gamma());
  const std::uint64_t produced = local_clock_.load(std::memory_order_relaxed);
  const double model_bytes = static_cast<double>(floats_ * sizeof(float));
  const double wait_s =
      network_wait_seconds(2.0 * static_cast<double>(ctx_.nodes - 1) * model_bytes);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(wait_s));
  sender_->begin_flush();  // rounds from here on: not training's
  bool flushed = false;
  while (!sender_->stopped()) {
    flushed = sender_->sent_clock() >= produced;
    if (flushed || Clock::now() >= deadline) break;
    post_pump();
    end_.wait(std::chrono::milliseconds(20));  // the sender notifies after each pump
  }
  if (!flushed && !sender_->stopped()) {
    spdlog::warn("ako: {} of {} gradients were not sent before the end of the job",
                 produced - sender_->sent_clock(), produced);
  }
  // A gradient's ranges reach a peer over p rounds (sec. 3.1): send each peer, once, whole,
  // what it has not received yet (warm-up rounds need nothing: they delivered whole). Then stop
  // the network side, so no later pump sends anything.
  sender_->stop(flushed && !average_);
  // Tell every live peer this node has sent all it will, then wait (bounded) for theirs; a peer
  // that fails meanwhile is no longer waited for.
  sender_->broadcast(control_lane_, ako::Kind::kDone, 0, 0, net::Payload{});
  const auto live_peer = [this](std::size_t r) { return live(r); };
  const bool all_done = end_.await_done(deadline, live_peer);
  if (!all_done) {
    spdlog::warn(
        "ako: {} of {} peers did not finish sending within {:.0f} s (for up to {:.1f} "
        "MB per peer at B = {:.3g} MB/s)",
        end_.pending(live_peer), ctx_.nodes - 1, wait_s, model_bytes / 1e6, bandwidth_ / 1e6);
  }
  if (average_ && all_done && !failed_.load(std::memory_order_acquire)) {
    try {
      average_replicas();
      return true;
    } catch (const PeerError& e) {  // the replica is untouched (the ring reduced a copy)
      spdlog::warn(
          "ako: averaging the replicas failed ({}); this node folds in what it has "
          "received instead",
          e.what());
      apply_staging();
      return true;
    }
  }
  if (average_ && all_done) {  // a peer failed; every live one finished
    // As the ring's mean: staged partitions are dropped (their gradients are in the replicas of
    // the nodes that made them).
    const std::size_t averaged = average_survivors();
    if (averaged > 1) return true;
    spdlog::warn("ako: no surviving peer's replica arrived: this node keeps its own");
    apply_staging();
    return true;
  }
  if (average_) {
    spdlog::warn(
        "ako: a peer did not finish: the replicas are not averaged; this node keeps its "
        "replica with what it has received folded in");
  }
  // Every peer's partitions have been staged (or a peer failed, or the deadline passed): fold
  // them in, so the final replica holds every node's gradients (all replicas then agree up to
  // float rounding: plain SGD sums the same updates in another order).
  apply_staging();
  return true;
}

void AkoStage::average_replicas() {
  const auto start = Clock::now();
  // A copy of the replica (once, at the end of the job): the ring reduces its input in place and
  // the loop thread may still stage a late partition.
  ReplicaAverage replicas(ctx_.model);
  // Bounded: a peer that saw another fail averages among the survivors instead and never joins
  // the ring (with a clean Goodbye, which is no failure here). Each node sends and receives
  // 2 (n - 1) / n of the model; past the bound the ring fails, naming the rank it receives from.
  const double wait_s = network_wait_seconds(2.0 * static_cast<double>(floats_ * sizeof(float)));
  std::mutex watch_mutex;
  std::condition_variable watch_changed;
  bool ring_over = false;
  std::thread watchdog([&] {
    std::unique_lock lock(watch_mutex);
    if (watch_changed.wait_for(lock, std::chrono::duration<double>(wait_s),
                               [&] { return ring_over; })) {
      return;
    }
    const std::size_t from = (ctx_.rank + ctx_.nodes - 1) % ctx_.nodes;
    average_->fail_all(std::make_exception_ptr(
        PeerError(from, router_.address(from),
                  "the final average (a ring all-reduce of the replicas) did not complete within " +
                      std::to_string(static_cast<int>(wait_s)) +
                      " s: a peer may have gone on without this node (it saw another one fail)")));
  });
  const auto stop_watchdog = [&] {
    {
      const std::lock_guard lock(watch_mutex);
      ring_over = true;
    }
    watch_changed.notify_all();
    watchdog.join();
  };
  try {
    replicas.reduce(ctx_.executor, *average_, "ako_average");
  } catch (...) {
    stop_watchdog();
    throw;
  }
  stop_watchdog();
  replicas.write_back(*average_, ctx_.nodes, true);
  spdlog::info("ako: the final model is the mean of the {} replicas ({:.2f} s)", ctx_.nodes,
               std::chrono::duration<double>(Clock::now() - start).count());
}

std::size_t AkoStage::average_survivors() {
  const auto start = Clock::now();
  const std::span<float> w = ctx_.model.parameters();
  // Once per job: one m-float payload, shared by every peer's frame.
  net::Payload mine = net::Payload::allocate(floats_ * sizeof(float));
  std::memcpy(mine.mutable_bytes().data(), w.data(), floats_ * sizeof(float));
  sender_->broadcast(full_round_lane_, ako::Kind::kReplica, 0, 0, mine);
  const auto deadline =
      start +
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
          network_wait_seconds(static_cast<double>((ctx_.nodes - 1) * floats_ * sizeof(float)))));
  const std::size_t count =
      end_.average_survivors(w, deadline, [this](std::size_t r) { return live(r); });
  spdlog::info(
      "ako: a peer failed; the final model is the mean of the {} surviving replicas "
      "({:.2f} s)",
      count, std::chrono::duration<double>(Clock::now() - start).count());
  return count;
}

void AkoStage::pause(bool paused) {
  const auto now = Clock::now();
  // An open profile window leaves the pause out: its start moves later by the pause's length.
  if (paused) {
    paused_at_ = now;
  } else if (profile_started_ && paused_at_) {
    profile_start_ += now - *paused_at_;
  }
  if (sender_) sender_->pause(paused, now);
}

std::map<std::string, double> AkoStage::summary() const {
  std::map<std::string, double> out;
  {
    const ako::PartitionChoice c = agreement_->choice(plans_needed() - 1);
    const ako::PartitionChoice warmup = agreement_->choice(0);
    out["partitions"] = static_cast<double>(c.partitions);
    out["gamma"] = c.gamma;
    out["model_bytes"] = c.model_bytes;
    out["bandwidth"] = c.bandwidth;
    out["nodes"] = static_cast<double>(c.nodes);
    out["predicted_send_rate"] = c.predicted_send_rate();
    out["eq3"] = c.eq3;
    out["warmup_gamma"] = auto_partitions_ ? warmup.gamma : 0.0;
    out["warmup_partitions"] = auto_partitions_ ? static_cast<double>(warmup.partitions) : 0.0;
  }
  out["staleness"] = static_cast<double>(options_.staleness);
  out["gradients"] = static_cast<double>(local_clock_.load());
  out["rounds_sent"] = sender_ ? static_cast<double>(sender_->rounds_sent()) : 0.0;
  out["full_rounds"] = sender_ ? static_cast<double>(sender_->full_rounds()) : 0.0;
  out["partitions_received"] = static_cast<double>(receiver_.partitions_received());
  out["full_rounds_received"] = static_cast<double>(receiver_.full_rounds_received());
  out["staleness_waits"] = static_cast<double>(clocks_.waits());
  out["peers_failed"] = static_cast<double>(membership_.failures());
  out["peers_rejoined"] = static_cast<double>(membership_.rejoins());
  out["rejoined"] = rejoined_ ? 1.0 : 0.0;
  out["profile_iterations"] = static_cast<double>(profiled_.load());
  // One node has no sender and sends nothing: every figure 0.
  const ako::SendRateMeter::Figures measured =
      sender_ ? sender_->measured() : ako::SendRateMeter::Figures{};
  out["measured_seconds"] = measured.seconds;
  out["measured_send_rate"] = measured.send_rate;
  out["measured_gamma"] = measured.gamma;
  const std::size_t final_plan = plans_needed() - 1;
  const bool agreed = agreement_->agreed() > final_plan;
  for (std::size_t r = 0; r < ctx_.nodes; ++r) {
    if (r == ctx_.rank) continue;
    out["link_partitions_" + std::to_string(r)] =
        agreed ? static_cast<double>(agreement_->link_partitions(final_plan, r)) : 0.0;
    out["link_round_bytes_" + std::to_string(r)] = measured.link_round_bytes[r];
  }
  return out;
}

std::vector<LayerPlan> AkoStage::plan() const {
  std::size_t p = std::max<std::size_t>(1, ctx_.nodes - 1);  // auto, before agreement: a guess
  if (auto q = partitions()) p = *q;
  const double overhead =
      frame_overhead_bytes(partition_lane_, static_cast<std::uint16_t>(ako::Kind::kPartition));
  std::vector<LayerPlan> rows;
  for (std::size_t l = 0; l < ctx_.model.num_layers(); ++l) {
    LayerPlan row = describe_layer(ctx_.model, l, "ako");
    // Sec. 3.2: per gradient (one round), one partition of m / p floats in one frame to each of
    // the n - 1 peers; this layer's share of those bytes (frame headers shared pro rata).
    const double share = static_cast<double>(row.parameters) / static_cast<double>(floats_);
    row.predicted_bytes_sent =
        static_cast<double>(ctx_.nodes - 1) *
        (static_cast<double>(row.parameters * sizeof(float)) / static_cast<double>(p) +
         share * overhead);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace gradmesh::sync
