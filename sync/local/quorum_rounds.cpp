#include "sync/local/quorum_rounds.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

namespace gradmesh::sync::local {

namespace {

/// An owned payload holding `a` then `b`.
net::Payload float_payload(std::span<const float> a, std::span<const float> b = {}) {
  net::Payload p = net::Payload::allocate(a.size_bytes() + b.size_bytes());
  const std::span<std::byte> out = p.mutable_bytes();
  if (!a.empty()) std::memcpy(out.data(), a.data(), a.size_bytes());
  if (!b.empty()) std::memcpy(out.data() + a.size_bytes(), b.data(), b.size_bytes());
  return p;
}

}  // namespace

QuorumRounds::QuorumRounds(LaneRouter& router, LaneId lane, std::size_t rank, std::size_t nodes,
                           std::size_t quorum, std::optional<std::size_t> min_nodes,
                           std::span<const float> initial, std::size_t states,
                           OuterOptimizer& outer)
    : router_(router),
      lane_(lane),
      rank_(rank),
      nodes_(nodes),
      quorum_(quorum),
      floats_(initial.size()),
      states_(states),
      outer_(outer),
      membership_(rank, nodes, min_nodes),
      final_sent_(nodes, false),
      wants_(nodes),
      final_sent_to_(nodes, false),
      acked_(nodes, false) {
  GRADMESH_CHECK(nodes >= 2 && rank < nodes, "QuorumRounds: a rank of a job of 2 or more nodes");
  GRADMESH_CHECK(quorum >= 1 && quorum <= nodes, "QuorumRounds: a quorum in [1, nodes]");
  if (leader()) {
    global_.assign(initial.begin(), initial.end());
    mean_.resize(floats_);
    newest_ = float_payload(global_);  // version 0: what a node rejoining before a merge takes
    merger_ = std::thread([this] { merge_loop(); });
  }
}

QuorumRounds::~QuorumRounds() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (merger_.joinable()) merger_.join();
}

void QuorumRounds::Wake::run() const {
  if (!done) return;
  if (error) {
    done->fail(error);
  } else {
    done->complete();
  }
}

std::size_t QuorumRounds::training_locked() const {
  std::size_t count = 0;
  for (std::size_t r = 0; r < nodes_; ++r) {
    if ((r == rank_ || !membership_.dead(r)) && !final_sent_[r]) ++count;
  }
  return count;
}

bool QuorumRounds::due_locked() const {
  if (!leader() || waiting_.empty() || all_final_locked()) return false;
  std::size_t distinct = 0;
  for (std::size_t i = 0; i < waiting_.size(); ++i) {
    bool first = true;
    for (std::size_t j = 0; j < i && first; ++j) first = waiting_[j].rank != waiting_[i].rank;
    if (first) ++distinct;
  }
  return distinct >= std::max<std::size_t>(1, std::min(quorum_, training_locked()));
}

bool QuorumRounds::end_due_locked() const {
  return leader() && !end_sent_ && finals_.size() >= std::min(quorum_, membership_.live());
}

bool QuorumRounds::all_final_locked() const {
  for (std::size_t r = 0; r < nodes_; ++r) {
    if ((r == rank_ || !membership_.dead(r)) && !final_sent_[r]) return false;
  }
  return true;
}

QuorumRounds::Wake QuorumRounds::wake_locked() {
  Wake w;
  if (!waiter_) return w;
  if (failed_ || version_ > adopted_) {
    w.done = std::move(*waiter_);
    w.error = failed_;
    waiter_.reset();
  }
  return w;
}

QuorumRounds::Wake QuorumRounds::fail_locked(std::exception_ptr error) {
  if (!failed_) failed_ = std::move(error);
  changed_.notify_all();
  return wake_locked();
}

void QuorumRounds::contribute(std::span<const float> delta) {
  GRADMESH_CHECK_EQ(delta.size(), floats_, "QuorumRounds::contribute: a Delta of the model");
  net::Payload payload = float_payload(delta);
  std::uint64_t from = 0;
  {
    std::lock_guard lock(mutex_);
    if (failed_) std::rethrow_exception(failed_);
    from = adopted_;
    if (leader()) waiting_.push_back({rank_, from, std::move(payload)});
  }
  if (leader()) {
    changed_.notify_all();  // the merge thread
    return;
  }
  if (auto error = router_.send(
          kQuorumLeader, net::Message{lane_, kQuorumDeltaKind, 0, from, std::move(payload)})) {
    throw *error;
  }
}

void QuorumRounds::await(engine::Completion done) {
  Wake wake;
  {
    std::lock_guard lock(mutex_);
    GRADMESH_CHECK(!waiter_, "QuorumRounds::await: one wait at a time");
    waiter_ = std::move(done);
    wake = wake_locked();
  }
  wake.run();
}

void QuorumRounds::mean_of(const std::vector<Waiting>& deltas, std::size_t count,
                           std::optional<std::uint64_t> version) {
  std::fill(mean_.begin(), mean_.end(), 0.0f);
  for (const Waiting& w : deltas) {
    const std::span<const float> d = w.delta.as<float>().first(floats_);
    const float weight = version ? 1.0f / static_cast<float>(1 + (*version - w.from)) : 1.0f;
    for (std::size_t i = 0; i < floats_; ++i) mean_[i] += weight * d[i];
  }
  const float scale = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
  for (float& x : mean_) x *= scale;
}

namespace {

/// The number of distinct ranks of `deltas`, sorted by rank then version (the order the mean
/// sums them in, the same on every run that merges the same Deltas).
template <class W>
std::size_t sort_and_count(std::vector<W>& deltas) {
  std::sort(deltas.begin(), deltas.end(), [](const W& a, const W& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.from < b.from;
  });
  std::size_t distinct = 0;
  for (std::size_t i = 0; i < deltas.size(); ++i) {
    if (i == 0 || deltas[i].rank != deltas[i - 1].rank) ++distinct;
  }
  return distinct;
}

}  // namespace

void QuorumRounds::merge_loop() {
  std::vector<Waiting> batch;
  std::unique_lock lock(mutex_);
  for (;;) {
    const auto replies_due = [&] {
      for (const std::optional<std::uint64_t>& w : wants_) {
        if (w && version_ > *w) return true;
      }
      return false;
    };
    changed_.wait(lock, [&] {
      return stop_ || failed_ || due_locked() || end_due_locked() || !joins_.empty() ||
             replies_due();
    });
    if (stop_ || failed_) return;
    if (replies_due()) {
      // The newest version to each node whose round waits for one newer than its start.
      std::vector<std::size_t> peers;
      for (std::size_t peer = 0; peer < nodes_; ++peer) {
        if (wants_[peer] && version_ > *wants_[peer]) {
          wants_[peer].reset();
          if (!membership_.dead(peer)) peers.push_back(peer);
        }
      }
      const net::Payload model = newest_;
      const std::uint64_t version = version_;
      lock.unlock();
      for (const std::size_t peer : peers)
        (void)router_.send(peer, net::Message{lane_, kQuorumModelKind, 0, version, model});
      lock.lock();
      continue;
    }
    if (!joins_.empty()) {
      // Restarted nodes: the newest version and how far the leader is.
      std::vector<std::size_t> joiners;
      joiners.swap(joins_);
      const net::Payload model = newest_;
      const std::uint64_t version = version_;
      const std::uint64_t done = iterations_.load(std::memory_order_relaxed);
      lock.unlock();
      for (const std::size_t peer : joiners) {
        spdlog::info(
            "local: sent rank {} version {} of the global model to rejoin with, at "
            "iteration {}",
            peer, version, done);
        (void)router_.send(peer, net::Message{lane_, kQuorumJoinStateKind, done, version, model});
      }
      lock.lock();
      continue;
    }
    if (end_due_locked()) {
      // A quorum has ended: the nodes still training end at their next iteration boundary.
      end_sent_ = true;
      ended_.store(true, std::memory_order_release);
      std::vector<std::size_t> training;
      for (std::size_t peer = 0; peer < nodes_; ++peer) {
        if (peer != rank_ && !membership_.dead(peer) && !final_sent_[peer])
          training.push_back(peer);
      }
      lock.unlock();
      if (!training.empty()) {
        spdlog::info(
            "local: {} of {} nodes have ended (sync.local.quorum = {}): the {} still "
            "training end at their next iteration",
            nodes_ - training.size(), nodes_, quorum_, training.size());
      }
      for (const std::size_t peer : training)
        (void)router_.send(peer, net::Message{lane_, kQuorumEndKind, 0, 0, {}});
      lock.lock();
      continue;
    }
    batch.clear();
    batch.swap(waiting_);
    const std::uint64_t version = version_;
    const std::size_t training = training_locked();
    const std::size_t live = membership_.live();
    merging_ = true;
    lock.unlock();
    // theta_g <- outer(theta_g, sum of Delta / (1 + staleness) over the n live nodes): a fresh
    // change counts 1 / n whenever it arrives (with every node's fresh Delta in, their mean), a
    // stale one less (Zhang et al., "Staleness-aware Async-SGD", IJCAI'16: the step over the
    // staleness). Dividing by the Deltas in instead, or leaving stale ones whole, made DiLoCo's
    // Nesterov step diverge on the demo MLP (bench/stragglers.sh, all fast: 9.5% after 3
    // epochs; docs/strategies.md).
    const std::size_t distinct = sort_and_count(batch);
    mean_of(batch, live, version);
    outer_.step(global_, mean_);
    const net::Payload model = float_payload(global_);
    lock.lock();
    version_ = version + 1;
    newest_ = model;
    merging_ = false;
    ++figures_.merges;
    if (distinct < training) ++figures_.partial_merges;
    for (const Waiting& w : batch) {
      const std::uint64_t staleness = version - w.from;
      ++figures_.contributions;
      if (staleness > 0) ++figures_.stale;
      figures_.staleness_sum += staleness;
      figures_.max_staleness = std::max(figures_.max_staleness, staleness);
    }
    const Wake wake = wake_locked();
    changed_.notify_all();
    lock.unlock();
    wake.run();  // the models go out as answers, at the loop's next turn
    lock.lock();
  }
}

void QuorumRounds::adopt(std::span<float> theta) {
  GRADMESH_CHECK_EQ(theta.size(), floats_, "QuorumRounds::adopt: the model's parameters");
  net::Payload model;
  std::uint64_t version = 0;
  {
    std::lock_guard lock(mutex_);
    if (failed_) std::rethrow_exception(failed_);
    model = newest_;
    version = version_;
  }
  if (version == adopted_) return;  // none newer (version 0 is the model every node starts from)
  const std::span<const float> w = model.as<float>();
  std::copy(w.begin(), w.end(), theta.begin());
  std::lock_guard lock(mutex_);
  adopted_ = version;
}

void QuorumRounds::finish(std::span<const float> delta, std::span<float> theta,
                          std::span<float> states) {
  GRADMESH_CHECK(delta.size() == floats_ && theta.size() == floats_ && states.size() == states_,
                 "QuorumRounds::finish: the model's parameters and layer states");
  net::Payload last = float_payload(delta, states);
  if (!leader()) {
    std::uint64_t from = 0;
    {
      std::lock_guard lock(mutex_);
      if (failed_) std::rethrow_exception(failed_);
      from = adopted_;
    }
    if (auto error = router_.send(
            kQuorumLeader, net::Message{lane_, kQuorumFinalKind, 0, from, std::move(last)})) {
      throw *error;
    }
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return failed_ || !final_model_.empty(); });
    if (failed_) std::rethrow_exception(failed_);
    const std::span<const float> in = final_model_.as<float>();
    std::copy(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(floats_), theta.begin());
    std::copy(in.begin() + static_cast<std::ptrdiff_t>(floats_), in.end(), states.begin());
    lock.unlock();
    // The leader ends once every node has it (a failure here is the transport's to report).
    (void)router_.send(kQuorumLeader, net::Message{lane_, kQuorumFinalAckKind, 0, 0, {}});
    return;
  }
  {
    std::lock_guard lock(mutex_);
    finals_.push_back({rank_, adopted_, std::move(last)});
    final_sent_[rank_] = true;
  }
  changed_.notify_all();  // one node fewer training: a merge may be due
  // The merge thread goes on for the nodes still training until every live node has sent its
  // last; then it stops, and the Deltas still waiting go into the final merge.
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return failed_ || (all_final_locked() && !merging_); });
    if (failed_) std::rethrow_exception(failed_);
    stop_ = true;
  }
  changed_.notify_all();
  merger_.join();
  // The final model: theta_g minus the mean over the nodes of every change not yet merged.
  std::vector<Waiting> changes;
  std::vector<Waiting> finals;
  std::uint64_t version = 0;
  std::size_t live = 1;
  QuorumFigures seen;
  {
    std::lock_guard lock(mutex_);
    live = membership_.live();
    changes.swap(waiting_);
    finals = finals_;
    version = version_;
    seen = figures_;
  }
  {
    std::lock_guard lock(mutex_);
    figures_.final_deltas = changes.size();
  }
  changes.insert(changes.end(), finals.begin(), finals.end());
  const std::size_t distinct = sort_and_count(changes);
  mean_of(changes, live);
  for (std::size_t i = 0; i < floats_; ++i) theta[i] = global_[i] - mean_[i];
  std::fill(states.begin(), states.end(), 0.0f);
  sort_and_count(finals);  // rank order
  for (const Waiting& f : finals) {
    const std::span<const float> s = f.delta.as<float>().subspan(floats_);
    for (std::size_t i = 0; i < states_; ++i) states[i] += s[i];
  }
  const float scale = 1.0f / static_cast<float>(finals.size());
  for (float& x : states) x *= scale;
  const net::Payload model = float_payload(theta, states);
  std::vector<std::size_t> peers;
  {
    std::lock_guard lock(mutex_);
    for (std::size_t peer = 0; peer < nodes_; ++peer) {
      if (peer == rank_ || membership_.dead(peer)) continue;
      final_sent_to_[peer] = true;
      peers.push_back(peer);
    }
  }
  for (const std::size_t peer : peers)
    (void)router_.send(peer, net::Message{lane_, kQuorumFinalModelKind, 0, version + 1, model});
  {
    // Until every live node has it: closing the transport under a final model still on a slow
    // link would fail the nodes waiting for it.
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] {
      if (failed_) return true;
      for (std::size_t peer = 0; peer < nodes_; ++peer) {
        if (final_sent_to_[peer] && !membership_.dead(peer) && !acked_[peer]) return false;
      }
      return true;
    });
    if (failed_) std::rethrow_exception(failed_);
  }
  spdlog::info(
      "local: the final model is the global model of version {} with the {} node(s)' changes "
      "not yet merged averaged in ({} merges, {} of them without every node still training)",
      version, distinct, seen.merges, seen.partial_merges);
}

bool QuorumRounds::owns(const net::Message& message) noexcept {
  return message.kind >= kQuorumDeltaKind && message.kind <= kQuorumFinalAckKind;
}

void QuorumRounds::on_message(std::size_t from, net::Message&& message) {
  const std::size_t bytes = message.payload.size();
  const std::size_t model_bytes = floats_ * sizeof(float);
  const std::size_t final_bytes = (floats_ + states_) * sizeof(float);
  std::string why;
  Wake wake;
  {
    std::lock_guard lock(mutex_);
    switch (message.kind) {
      case kQuorumDeltaKind:
      case kQuorumFinalKind: {
        const bool last = message.kind == kQuorumFinalKind;
        if (!leader()) {
          why = "a Delta sent to rank " + std::to_string(rank_) + ", which does not merge";
        } else if (bytes != (last ? final_bytes : model_bytes)) {
          why = "a Delta of " + std::to_string(bytes) + " bytes, expected " +
                std::to_string(last ? final_bytes : model_bytes);
        } else if (membership_.dead(from)) {
          why = "a Delta from a dropped peer";
        } else if (message.round > version_) {
          why = "a Delta from version " + std::to_string(message.round) + ", newer than " +
                std::to_string(version_);
        } else if (last && final_sent_[from]) {
          why = "a second last Delta";
        } else if (last) {
          wants_[from].reset();  // it waits for the final model now
          final_sent_[from] = true;
          finals_.push_back({from, message.round, std::move(message.payload)});
        } else {
          wants_[from] = message.round;  // it waits for a version newer than this
          waiting_.push_back({from, message.round, std::move(message.payload)});
        }
        break;
      }
      case kQuorumModelKind:
      case kQuorumFinalModelKind: {
        const bool last = message.kind == kQuorumFinalModelKind;
        if (from != kQuorumLeader || leader()) {
          why = "a global model from rank " + std::to_string(from) + ", which does not merge";
        } else if (bytes != (last ? final_bytes : model_bytes)) {
          why = "a global model of " + std::to_string(bytes) + " bytes, expected " +
                std::to_string(last ? final_bytes : model_bytes);
        } else if (last) {
          final_model_ = std::move(message.payload);
        } else if (message.round <= version_) {
          why = "version " + std::to_string(message.round) + " after version " +
                std::to_string(version_);
        } else {
          version_ = message.round;
          newest_ = std::move(message.payload);
        }
        break;
      }
      case kQuorumFinalAckKind:
        if (!leader() || bytes != 0) {
          why = "a final model's receipt sent to rank " + std::to_string(rank_);
        } else {
          acked_[from] = true;
        }
        break;
      case kQuorumJoinKind:
        if (!leader() || bytes != 0 || membership_.dead(from)) {
          why = "a join request to rank " + std::to_string(rank_) +
                (leader() ? " from a peer not taken back" : ", which does not merge");
        } else {
          final_sent_[from] = false;
          joins_.push_back(from);
        }
        break;
      case kQuorumJoinStateKind:
        if (from != kQuorumLeader || leader() || bytes != model_bytes) {
          why = "a state to rejoin with from rank " + std::to_string(from) + " of " +
                std::to_string(bytes) + " bytes";
        } else {
          join_iteration_ = message.key;
          join_version_ = message.round;
          join_state_ = std::move(message.payload);
        }
        break;
      case kQuorumEndKind:
        if (from != kQuorumLeader || leader() || bytes != 0) {
          why = "an end from rank " + std::to_string(from) + ", which does not merge";
        } else {
          ended_.store(true, std::memory_order_release);
        }
        break;
      default:
        why = "kind " + std::to_string(message.kind) + ": not quorum rounds'";
    }
    if (why.empty()) {
      changed_.notify_all();
      wake = wake_locked();
    }
  }
  wake.run();
  if (!why.empty()) router_.reject(from, lane_, "local quorum rounds: " + why);
}

void QuorumRounds::on_failure(const PeerError& error) {
  const std::size_t peer = error.rank();
  if (peer >= nodes_ || peer == rank_) return;
  Wake wake;
  const std::optional<ako::Membership::Dropped> dropped = membership_.drop(peer);
  if (!dropped) return;  // reported already
  if (peer == kQuorumLeader) {
    // No merges without it. Below the majority this node is cut off too (check() says so).
    if (!dropped->quorum_holds)
      (void)membership_.cut_off([this](std::size_t r) { return router_.address(r); }, error.what());
    spdlog::error("local: {}: the leader that merges the quorum rounds is gone", error.what());
    {
      std::lock_guard lock(mutex_);
      wake = fail_locked(std::make_exception_ptr(error));
    }
    wake.run();
    return;
  }
  if (dropped->quorum_holds) {
    spdlog::warn("local: {}; dropped: the quorum rounds go on with {} of {} nodes", error.what(),
                 dropped->live, nodes_);
    std::lock_guard lock(mutex_);
    changed_.notify_all();
    wake = wake_locked();  // a merge may be due with one node fewer to wait for
  } else {
    const std::optional<std::string> why =
        membership_.cut_off([this](std::size_t r) { return router_.address(r); }, error.what());
    if (why) spdlog::error("local: {}", *why);
    std::lock_guard lock(mutex_);
    wake = fail_locked(std::make_exception_ptr(Error(why.value_or(error.what()))));
  }
  wake.run();
}

std::uint64_t QuorumRounds::join(std::span<float> theta, double timeout_s) {
  if (leader()) {
    throw Error(
        "local: rank 0 merges the quorum rounds, and the job stops when it fails: there is no "
        "job for it to rejoin; start the job again");
  }
  GRADMESH_CHECK_EQ(theta.size(), floats_, "QuorumRounds::join: the model's parameters");
  spdlog::info("local: rejoining: asking rank {} for the newest global model", kQuorumLeader);
  if (auto error = router_.send(kQuorumLeader, net::Message{lane_, kQuorumJoinKind, 0, 0, {}})) {
    throw *error;
  }
  std::unique_lock lock(mutex_);
  const bool answered = changed_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                          [&] { return failed_ || !join_state_.empty(); });
  if (failed_) std::rethrow_exception(failed_);
  if (!answered) {
    throw Error("local: rank 0 (" + router_.address(kQuorumLeader) +
                ") sent no global model within " + std::to_string(static_cast<int>(timeout_s)) +
                " s to rejoin with");
  }
  const std::span<const float> w = join_state_.as<float>();
  std::copy(w.begin(), w.end(), theta.begin());
  // Its Deltas are relative to the version it holds; a newer one may have come in meanwhile.
  adopted_ = join_version_;
  if (version_ <= join_version_) {
    version_ = join_version_;
    newest_ = join_state_;
  }
  spdlog::warn("local: rejoined from rank 0's global model of version {} at its iteration {}",
               join_version_, join_iteration_);
  return join_iteration_;
}

void QuorumRounds::on_rejoin(std::size_t peer) {
  if (peer >= nodes_ || peer == rank_) return;
  const std::optional<std::size_t> live = membership_.take_back(peer);
  if (!live) return;
  spdlog::warn("local: rank {} restarted and rejoined: {} of {} nodes live", peer, *live, nodes_);
  std::lock_guard lock(mutex_);
  changed_.notify_all();
}

QuorumFigures QuorumRounds::figures() const {
  std::lock_guard lock(mutex_);
  return figures_;
}

}  // namespace gradmesh::sync::local
