#pragma once
// The planner's start-up measurements of the network ("Measure, don't guess"): alpha and B of
// every link, measured by each node on the job's own transport, then exchanged so every node
// plans from identical input. alpha and B are the start-up time and bandwidth of MG-WFBP's
// alpha-beta model (eq. 9: T_ar(M) = a + b M, beta = 1/B); measuring them at start-up and planning
// each stage's traffic from them is the role of Poseidon's bandwidth manager (arXiv'15 sec. 4.3.3).
// The per-layer times and the GEMM rate are measured by tasks/profile.h and carried along here.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "sync/channel.h"
#include "sync/probe/messages.h"
#include "topo/cost_model.h"

namespace gradmesh::sync {

/// How the link probe measures. Every node must use the same options (they come from the job
/// config, which the handshake checks).
struct LinkProbeOptions {
  /// Ping-pong round trips per peer; alpha = median round-trip time / 2. >= 1.
  std::size_t pings = 16;
  /// Bytes of the bandwidth transfer to each peer (sent in messages of at most 256 KiB). >= 1.
  std::size_t bulk_bytes = 4 << 20;
  /// net.max_send_rate, bytes/s (> 0), when the transport paces this node's writes: bulk_bytes is
  /// cut to at most rate x 0.1 s (at least 64 KiB) so the probe stays short, and B is capped at
  /// the rate (the token bucket's initial burst would otherwise read high). nullopt: no cap.
  std::optional<double> max_send_rate;
  /// Seconds the whole measure_links() (and each exchange() and barrier()) may take; past it
  /// they throw a PeerError naming the rank that did not answer. > 0. measure_links() needs about
  /// (n - 1) x bulk bytes / B: on a slow link without max_send_rate set, raise it.
  double timeout_s = 10;
};

/// The bulk transfer size the probe uses for `options`: bulk_bytes, cut to
/// max(64 KiB, max_send_rate x 0.1 s) when a rate is set. Bytes.
[[nodiscard]] std::size_t effective_bulk_bytes(const LinkProbeOptions& options) noexcept;

/// What one node measured and computed, exchanged so every node plans from identical input.
struct NodeProfile {
  std::vector<double> alpha;             ///< seconds, this node -> peer (index = rank; own entry 0)
  std::vector<double> bandwidth;         ///< B, bytes/s, this node -> peer (own entry 0)
  std::vector<double> forward_seconds;   ///< t_f per layer, seconds (may be empty)
  std::vector<double> backward_seconds;  ///< t_b per layer, seconds (same size as forward_seconds)
  double gemm_flops = 0;                 ///< FLOP/s (0: not measured)
  double message_seconds = 0;            ///< o, seconds each message of a burst costs (gap)
  /// t_b without the parameter gradients per layer (tasks::LayerTimes::backward_input_seconds),
  /// seconds (same size as forward_seconds)
  std::vector<double> backward_input_seconds;
  /// The optimizer step's time per parameter (tasks::ComputeProfile), seconds/float (0: not
  /// measured)
  double step_seconds_per_float = 0;

  friend bool operator==(const NodeProfile&, const NodeProfile&) = default;
};

/// Measures this node's links, exchanges profiles and holds start-up barriers, on stage "probe"
/// (sync/probe/messages.h) of a Channel.
///
/// alpha: ping-pong with empty messages, answered by the peer's handler at once on its delivery
/// thread; alpha = median RTT / 2 over `pings` round trips per peer. Then every node tells every
/// peer it has finished its pings and waits for theirs, so no bulk traffic delays a ping.
/// B: n - 1 rounds; in round r node i sends effective_bulk_bytes() to (i + r) mod n, in messages
/// of at most 256 KiB, and receives the transfer of (i - r) mod n; each receiver acks when it has
/// the whole transfer, and B = bytes / (ack time - start - alpha) (at least half the elapsed time
/// is kept in the denominator, so a tiny transfer cannot read as infinite). A node's round ends
/// when its ack came and its incoming transfer is complete, so rounds stay in step and each node
/// sends on one link at a time: B is the node's egress rate on that link (what net.max_send_rate
/// caps), not a share of n - 1 competing transfers. Arrival times are taken on the delivery thread.
/// o (topo::LinkCost::message_seconds): before the bulk rounds (so a send cap's token bucket is
/// full and paces none of it), three rounds in which every node at once sends a burst of 64
/// messages of 64 bytes to rank + 1 and times it to the ack the same way;
/// o = the median over the bursts of (elapsed - 2 alpha - bytes / B) / 63, at least 0: the gap
/// between messages of a burst, what each message costs the CPUs of both ends (syscalls,
/// wake-ups, dispatch), which a cost model by bytes alone misses when many small messages share
/// the cores (PS's KV chunks on loopback).
///
/// Errors: a malformed probe message (unknown kind, wrong size, wrong round, a pong or ack no
/// one waits for, a bad profile) is dropped via Channel::reject and counted there. A peer's failure
/// (Channel::on_failure), a failed send, or the timeout makes the waiting call throw PeerError
/// naming the rank and its address (Channel::address; for a timeout, the first rank whose answer
/// is missing).
///
/// Thread safety: construct before the transport starts (it routes "probe" and adds a failure
/// handler). measure_links(), exchange() and barrier() from one thread at a time; they block
/// (condition variables with deadlines, no busy waiting). The handlers run on the delivery thread
/// and never block. The Channel must outlive this object, and this object every handler call.
class LinkProbe {
 public:
  /// Routes stage "probe" on `channel`. Throws gradmesh::ContractError for bad options (printing
  /// the value) or when "probe" is already routed.
  LinkProbe(Channel& channel, LinkProbeOptions options);
  LinkProbe(const LinkProbe&) = delete;
  LinkProbe& operator=(const LinkProbe&) = delete;

  /// Every node calls it at once after the transport started. Measures alpha (seconds) and B
  /// (bytes/s) from this node to every peer and returns this node's row (times and GEMM rate
  /// left empty / 0 for the caller to fill). One node: zeros at once. Blocks at most timeout_s.
  /// Throws PeerError (a failed or silent peer), ContractError with nodes > 1 and no transport.
  [[nodiscard]] NodeProfile measure_links();

  /// Sends `local` (this node's profile: alpha and bandwidth of size n, forward and backward of
  /// equal size) to every peer and returns all n profiles (index = rank; entry rank() is `local`),
  /// identical on every node. Blocks at most timeout_s. Throws ContractError for a malformed
  /// `local`, PeerError for a failed or silent peer.
  [[nodiscard]] std::vector<NodeProfile> exchange(const NodeProfile& local);

  /// Returns once every node has called barrier() with the same `tag` (e.g. after each node routed
  /// its sync stage's handlers). A tag may be reused: each call consumes one arrival per peer.
  /// Blocks at most timeout_s. Throws PeerError for a failed or silent peer.
  void barrier(std::uint64_t tag);

  /// The probe's stage id.
  [[nodiscard]] StageId stage() const noexcept { return stage_; }

 private:
  using Clock = std::chrono::steady_clock;

  struct Incoming {  // the bulk transfer this node receives from one peer
    std::uint64_t expected = 0;   // bytes of the transfer under way (0: none)
    std::uint64_t received = 0;   // bytes of it so far
    std::uint64_t completed = 0;  // whole transfers received
    std::uint64_t awaited = 0;    // whole transfers this node's rounds have waited for so far
  };
  struct Outgoing {  // the bulk transfers this node sends to one peer
    std::uint64_t started = 0;    // transfers begun
    std::uint64_t acked = 0;      // transfers acknowledged
    std::uint64_t bytes = 0;      // bytes of the transfer under way
    Clock::time_point acked_at;   // arrival of the last ack
  };

  void on_message(std::size_t from, net::Message&& message);
  void on_failure(const PeerError& error);
  void on_bulk(std::size_t from, const net::Message& message);
  void on_ack(std::size_t from, const net::Message& message);
  void on_profile(std::size_t from, const net::Message& message);

  void send(std::size_t peer, probe::Kind kind, std::uint64_t key, std::uint64_t round,
            net::Payload payload = {});
  double ping_peer(std::size_t peer, Clock::time_point deadline);
  /// One transfer round: sends `total` bytes to rank + round in messages of `message_bytes`
  /// (views of `buffer`) and waits for the ack and for the transfer of rank - round. Returns
  /// seconds from the first send to the ack.
  double bulk_round(std::size_t round, const std::shared_ptr<std::vector<std::byte>>& buffer,
                    std::size_t message_bytes, std::uint64_t total, Clock::time_point deadline);
  /// Sends (kind, tag) to every peer and waits for one from each (consumed).
  void gate(probe::Kind kind, std::uint64_t tag, Clock::time_point deadline, const char* what);
  /// Waits on `lock` until ready(); throws the stored failure, or at `deadline` a PeerError for
  /// the rank missing() names.
  template <class Ready, class Missing>
  void wait(std::unique_lock<std::mutex>& lock, Clock::time_point deadline, Ready ready,
            Missing missing, const char* what);
  [[nodiscard]] Clock::time_point deadline() const;

  Channel& channel_;
  LinkProbeOptions options_;
  std::size_t bulk_bytes_;
  StageId stage_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<PeerError> failure_;  // the first peer failure
  // This node's outstanding ping (one at a time).
  std::size_t ping_to_ = 0;
  std::uint64_t ping_key_ = 0;
  bool ping_waiting_ = false;
  Clock::time_point pong_at_;
  std::uint64_t next_ping_key_ = 1;
  std::uint64_t phases_ = 0;  // measure_links() calls so far
  std::vector<Incoming> incoming_;  // by sender rank
  std::vector<Outgoing> outgoing_;  // by receiver rank
  // Arrivals per (kind, tag) and rank, for kPhase and kBarrier.
  std::map<std::pair<std::uint16_t, std::uint64_t>, std::vector<std::uint64_t>> gates_;
  std::vector<std::deque<NodeProfile>> profiles_;  // received, by sender rank
};

/// The job-wide measurements the planner takes (topo::PlannerInput's links, times and GEMM rate).
struct JobMeasurements {
  topo::LinkMatrix links;                ///< alpha (s) and B (bytes/s); row = the measuring node
  std::vector<double> forward_seconds;   ///< per layer, the max over nodes (BSP waits for the last)
  std::vector<double> backward_seconds;  ///< per layer, the max over nodes
  std::vector<double> backward_input_seconds;  ///< per layer, the max over nodes (no dW)
  double gemm_flops = 0;                 ///< FLOP/s, the min over nodes
  double step_seconds_per_float = 0;     ///< seconds/float, the max over nodes
};

/// Combines the n profiles (index = rank): the LinkMatrix from their rows (diagonal 0; o per
/// node); per layer
/// the max over nodes of t_f, of t_b and of t_b without dW (in BSP every iteration waits for the
/// slowest node) and of the step's time per float; the
/// min GEMM rate. Pure and deterministic, so every node computes the same from exchange()'s result.
/// Throws ContractError (printing the sizes) for no profiles, a row not of size n, or per-layer
/// vectors of different sizes.
[[nodiscard]] JobMeasurements combine(const std::vector<NodeProfile>& profiles);

}  // namespace gradmesh::sync
