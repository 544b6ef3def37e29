#pragma once
// Strategy `ako`: partial gradient exchange (Watcharapichat et al., "Ako: Decentralised Deep
// Learning with Partial Gradient Exchange", SoCC'16, sec. 3 and 4).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/message.h"
#include "sync/ako/accumulation_queue.h"
#include "sync/ako/partition_count.h"
#include "sync/ako/payload_pool.h"
#include "sync/ako/range_partition.h"
#include "sync/ako/staleness_clocks.h"
#include "sync/sync_stage.h"

namespace gradmesh::sync {

/// Ako's worker (sec. 4.2, Fig. 7): compute tasks never wait for the network; network tasks
/// accumulate, partition, send and receive.
///
/// Tasks added to each iteration's graph (all compute-arena, all cheap):
///  - ako_gate (root, precedes ako_apply): the staleness bound of sec. 3.3 / Algorithm 1 line 3,
///    a deferred task completed by the transport's loop thread when a peer's clock advances;
///  - ako_apply (precedes forward_0): folds the staging delta — the received partitions times
///    -lr, added by the loop thread under a mutex (line 13) — into the parameters. The loop thread
///    never writes the parameters itself, so there is no data race with forward/backward: received
///    partitions take effect at the start of the next iteration, not mid-pass. (The paper applies
///    them lock-free "at once" and accepts lost updates, sec. 4.2 step 5; we trade at most one
///    iteration of delay for race-free code.)
///  - ako_step_l (after backward_l): w_l -= lr (g_l + wd w_l) at once (line 5). Plain SGD, as
///    Algorithm 1 lines 5 and 13: optimizer.momentum is ignored (a warning says so), since momentum
///    on a replica that also receives other nodes' gradients has no counterpart in the paper.
///    Weight decay, if any, is folded into the gradient that is sent.
///  - ako_handoff (after backward_0 and every step): copies g_t into the handoff buffer (a memcpy,
///    or an add when the network side has not taken the previous one yet; no allocation), ticks
///    the local clock c_j (line 11) and posts the network round; the run then ends.
///
/// Network side (jobs posted on the network arena, serialised): folds the handed-off gradients
/// into the AccumulationQueue (line 6), then — if the previous rounds' payloads have been released
/// by the transport (a PayloadPool of 2 rounds of buffers) — sends round t: peer i gets range
/// (i + t) mod p of g*_t, copied into a pooled buffer, Message{kAkoPartition, key = range,
/// round = t}. When gradients come faster than rounds can be sent (sec. 4.2: network tasks
/// accumulate), several gradients are folded into one round and `round` carries c_j, the number
/// of gradients the round contains, so peers' staleness clocks stay exact; every gradient is still
/// sent exactly once per range and peer.
///
/// Partition count p (sec. 3.2, eq. 3): `sync.ako.partitions = N`, or auto: every node measures its
/// gradient rate gamma over its first iterations (at least kProfileIterations and kProfileSeconds,
/// skipping the first), with no sends: the gradients of that phase are handed off and folded
/// into a backlog as usual but go out only in round 1 (one round, like any coalesced one). Each
/// node broadcasts its gamma (kAkoProfile on Stage::kAkoControl) and all take the mean over nodes
/// — under the staleness bound every node advances at a common pace, and the mean is the least
/// noisy estimate of it from a short profile (on shared cores one node's short window is often
/// far off) — then p = ceil(gamma x m x (n - 1) / B), clamped to [1, min(128, m floats)]: the same
/// p on every node. The first iteration after profiling waits for every node's profile.
///
/// Errors: a peer failure fails the waiting gate (and every later one) with the PeerError, and
/// stops sending. Messages that break the protocol are dropped, counted and logged.
/// Thread safety: as SyncStage. Construction throws ConfigError for auto p without a bandwidth.
class AkoStage final : public SyncStage {
 public:
  /// Iterations over which gamma is profiled when sync.ako.partitions = auto.
  static constexpr std::uint64_t kProfileIterations = 20;
  /// And for at least this long, seconds (smooths the scheduling noise of shared cores).
  static constexpr double kProfileSeconds = 0.5;
  /// Rounds whose payloads may be queued in the transport at once.
  static constexpr std::size_t kRoundsInFlight = 2;

  explicit AkoStage(SyncContext context);
  ~AkoStage() override;
  AkoStage(const AkoStage&) = delete;
  AkoStage& operator=(const AkoStage&) = delete;

  [[nodiscard]] std::string_view name() const noexcept override { return "ako"; }
  void build(engine::Graph& graph, const IterationTasks& tasks) override;
  [[nodiscard]] std::vector<LayerPlan> plan() const override;
  /// Sends every gradient handed off but not yet sent (waiting at most 60 s for the transport),
  /// agreeing on p first if the job ended within the profiling phase; then stops sending.
  bool finish() override;
  /// "partitions", "gamma" (gradients/s: mean over nodes for auto p, this node's own for an
  /// explicit p, measured over the first "profile_iterations" iterations), "model_bytes", "bandwidth" (B, bytes/s;
  /// 0 for an explicit p without one), "nodes", "predicted_send_rate" (gamma m (n - 1) / p,
  /// bytes/s), "eq3" (the unrounded eq. 3 value), "staleness" (tau), "gradients" (c_j),
  /// "rounds_sent", "partitions_received", "staleness_waits", "profile_iterations".
  [[nodiscard]] std::map<std::string, double> summary() const override;
  [[nodiscard]] std::uint64_t rejected_messages() const noexcept override {
    return rejected_.load(std::memory_order_relaxed);
  }
  /// The agreed p, or nullopt while profiling.
  [[nodiscard]] std::optional<std::size_t> partitions() const;

 private:
  using Clock = std::chrono::steady_clock;

  // compute tasks
  void gate(engine::TaskContext& task);
  void apply_staging();
  void step_layer(std::size_t layer);
  void handoff();
  [[nodiscard]] double measured_gamma() const;

  // network side
  void post_pump();
  void pump();
  void send_round(std::uint64_t round);
  void drain(Clock::time_point deadline);
  void broadcast_profile(double gamma);

  // loop thread (and the network side for this node's own profile)
  void on_message(std::size_t from, net::Message&& message);
  void on_failure(const PeerError& error);
  void record_profile(std::size_t from, std::span<const double> values);
  void configure(std::size_t partitions);
  void record_local_gamma(double gamma);
  void apply_partition(std::size_t from, const net::Message& message);
  void reject(std::size_t from, const std::string& why);

  SyncContext ctx_;
  std::size_t floats_;   // m, floats
  float lr_;
  float weight_decay_;
  bool auto_partitions_;
  double bandwidth_ = 0;  // B for eq. 3, bytes/s; 0 when unknown

  ako::StalenessClocks clocks_;

  // Set once by configure(), before agreed_ (release); read after agreed_ (acquire).
  std::optional<ako::RangePartition> partition_;
  std::atomic<bool> agreed_{false};

  // Compute side (gate / handoff tasks; finish() after the last run).
  std::atomic<std::uint64_t> local_clock_{0};  // c_j
  bool profile_sent_ = false;
  std::atomic<std::uint64_t> profiled_{0};  // iterations of the profiling phase
  std::optional<Clock::time_point> first_gate_, first_handoff_;
  Clock::time_point last_handoff_{};

  // Handoff buffer: compute -> network.
  std::mutex inbox_mutex_;
  std::vector<float> inbox_;
  std::uint64_t inbox_count_ = 0;

  // Network side, under pump_mutex_.
  std::mutex pump_mutex_;
  std::vector<float> drained_;
  std::vector<float> backlog_;  // profiling: gradients folded before p is known
  std::uint64_t backlog_count_ = 0;
  std::unique_ptr<ako::AccumulationQueue> queue_;
  std::unique_ptr<ako::PayloadPool> pool_;
  std::uint64_t folded_ = 0;  // gradients folded into the queue
  std::atomic<bool> pump_posted_{false};
  std::atomic<bool> waiting_for_buffers_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<std::uint64_t> sent_clock_{0};   // gradients contained in rounds sent
  std::atomic<std::uint64_t> rounds_sent_{0};
  std::mutex flush_mutex_;
  std::condition_variable flushed_;

  // Receiving, under receive_mutex_: partitions that came before this node knew p.
  std::mutex receive_mutex_;
  std::vector<std::pair<std::size_t, net::Message>> early_;
  std::vector<std::uint64_t> last_round_;  // per peer: the last partition's round tag

  // Staging delta: -lr x received partitions, folded into the parameters by ako_apply.
  std::mutex staging_mutex_;
  std::vector<float> staging_;
  std::vector<char> dirty_;  // per range

  // Eq. 3 agreement.
  mutable std::mutex profile_mutex_;
  std::vector<std::optional<double>> gammas_;
  std::size_t profiles_ = 0;
  ako::PartitionChoice choice_;

  std::atomic<std::uint64_t> received_{0};
  std::size_t peers_done_ = 0;  // peers whose kAkoDone arrived; guarded by flush_mutex_
  std::atomic<std::uint64_t> rejected_{0};
};

}  // namespace gradmesh::sync
