#pragma once
// The planner's start-up measurements of the network ("Measure, don't guess"): alpha and B of
// every link, measured by each node on the job's own transport, then exchanged so every node
// plans from identical input. alpha and B are the start-up time and bandwidth of MG-WFBP's
// alpha-beta model (eq. 9: T_ar(M) = a + b M, beta = 1/B); measuring them at start-up and planning
// each lane's traffic from them is the role of Poseidon's bandwidth manager (arXiv'15 sec. 4.3.3).
// The per-layer times and the GEMM rate are measured by tasks/profile.h and carried along here.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "sync/collective/all_gather.h"
#include "sync/lane_router.h"
#include "sync/probe/messages.h"
#include "sync/probe/node_profile.h"
#include "topo/cost_model.h"

namespace gradmesh::sync {

/// How the link probe measures. Every node must use the same options (they come from the job
/// config, which the handshake checks).
struct LinkProbeOptions {
  /// Ping-pong round trips per peer; alpha = median round-trip time / 2. >= 1.
  std::size_t pings = 16;
  /// Bytes of the first bandwidth transfer to each peer: small, so that the slowest link answers
  /// it quickly (4 KiB: 33 ms at 1 Mbit/s). >= 1.
  std::size_t min_bulk_bytes = 4 << 10;
  /// Bytes of the largest transfer (>= min_bulk_bytes): a link that moves it in less than
  /// target_seconds is measured from it (as fast as the probe needs to know: 4 MiB take 3.4 ms at
  /// 10 Gbit/s).
  std::size_t max_bulk_bytes = 4 << 20;
  /// Seconds a transfer should last for B to be a measurement rather than an estimate: timer
  /// resolution, wake-ups, the ack's trip (alpha) and a shaper's burst allowance (tbf: 32 KB,
  /// 26 ms at 10 Mbit/s) are then a small part of it. > 0.
  double target_seconds = 0.1;
  /// Seconds the bulk rounds of measure_links() plan to take in all, whatever the links' speed
  /// (> 0): the transfers to each peer grow only while the next one is predicted to end inside
  /// its share of what is left; a link with no transfer of target_seconds yet may overrun it, up
  /// to 3 budget_s in all. A link on which no transfer could last target_seconds even then is
  /// reported as an estimate (LinkReport::kind), never as a failure.
  double budget_s = 1.5;
  /// net.max_send_rate, bytes/s (> 0), when the transport paces this node's writes: B is capped at
  /// the rate (the token bucket's initial burst would otherwise read high). nullopt: no cap.
  std::optional<double> max_send_rate;
  /// Seconds a peer may leave any one wait of the probe unanswered beyond the time its link was
  /// measured (or, before that, budgeted) to need; past it the wait throws a PeerError naming the
  /// rank, its address and what was measured of its link. Also the bound of each exchange() and
  /// barrier(): they carry a few hundred bytes, so their time is the slowest node's, not the
  /// link's. > 0.
  double timeout_s = 10;
};

/// How one link's B was obtained (LinkReport::kind).
enum class LinkMeasure {
  kMeasured,  ///< the fastest of the transfers that lasted at least target_seconds
  kAtBound,   ///< from a transfer of max_bulk_bytes, shorter than target_seconds: a fast link
  kEstimate,  ///< the budget (and its overrun) ran out before a transfer lasted target_seconds:
              ///< B from a shorter transfer, the lower of its two clocks
};

/// What the last measure_links() found on the link from this node to one peer.
struct LinkReport {
  double alpha = 0;           ///< seconds (median RTT / 2)
  double bandwidth = 0;       ///< B, bytes/s (capped at max_send_rate when set)
  std::uint64_t bytes = 0;    ///< bytes of the transfer B comes from
  double seconds = 0;         ///< its time, seconds: at the receiver, first to last message
                              ///< (a transfer of one message: the sender's, first send to ack)
  std::size_t transfers = 0;  ///< transfers sent to that peer (growing) in the last call
  /// Whether B comes from the steady part of its transfer, before a stall at the receiver (the
  /// class comment), rather than from the whole of it.
  bool steady = false;
  LinkMeasure kind = LinkMeasure::kEstimate;
};

/// Measures this node's links, exchanges profiles and holds start-up barriers, on lane "probe"
/// (sync/probe/messages.h) of a LaneRouter.
///
/// alpha: ping-pong with empty messages, answered by the peer's handler at once on its delivery
/// thread; alpha = median RTT / 2 over `pings` round trips per peer. Then every node tells every
/// peer it has finished its pings and waits for theirs, so no bulk traffic delays a ping.
/// B: n - 1 rounds; in round r node i measures its link to (i + r) mod n while (i - r) mod n
/// measures its link to i (a round with 2r = n, which pairs both directions of a link, in two
/// steps: the lower half of the ranks sends, then the upper, so no ack waits behind its own
/// node's bulk bytes in the kernel's send buffer). A measurement is a sequence of transfers, each
/// sent in about 8 messages (1 KiB to 256 KiB each) and acked by the receiver once it has all of
/// it (acks overtake queued bulk messages): the first of min_bulk_bytes, each next one larger
/// (x clamp(1.5 target / elapsed, 2, 8)) until one reaches max_bulk_bytes or the next would not
/// end inside 80% of the step's share of budget_s left (predicted from what the last transfer
/// cost, first send to ack; the next is then cut to fit, and the sequence ends when that is no
/// larger). While no transfer on the link has lasted target_seconds, the sequence may overrun its
/// share up to 3 budget_s from the probe's start. A kBulkDone ends the step's sequence. The
/// receiver times each transfer from its first message's arrival to its last and returns that in
/// the ack; a transfer's rate is its bytes after the first message over that time, which leaves
/// out the ack's trip (on a shaped link the ack queues behind the receiver's own bulk transfer
/// of the step: 0.3 s at 1 Mbit/s). A transfer of one message has only the sender's clock:
/// bytes / (ack time - start - alpha), at least half the elapsed time kept in the denominator.
/// B is the fastest transfer that lasted target_seconds (delays such as a loss's retransmission
/// timeout only make a transfer read slow; a shorter one may arrive in one clump or ride a
/// shaper's burst allowance and read fast), else the last one, as an estimate from the lower of
/// the two clocks. A transfer's rate on the receiver's clock is the faster of its whole spread's
/// and its steady part's (from its second message on, while each gap between two arrivals stays
/// within 1.5 times the median of its first three, at least two gaps and target_seconds / 3):
/// a lost segment's tail-loss probe or retransmission timeout leaves the link idle for tens to
/// hundreds of ms, and at 10 Mbit/s that made a link read 0.3-0.7 of its rate. A node's step ends
/// when its own sequence is over and the incoming one's kBulkDone came, and the next starts when
/// every node has ended it (a gate), so each node sends on one link and receives on one at a time:
/// B is the node's egress rate on that link (what net.max_send_rate caps), not a share of competing
/// transfers. So the probe takes about budget_s on a link slower than max_bulk_bytes per share (100
/// Mbit/s and below for 4 nodes), less on a faster one, and a slow link is a measurement, not a
/// timeout (a fixed 4 MiB transfer took 3.4 s per round at 10 Mbit/s). Arrival times are taken on
/// the delivery thread. o (topo::LinkCost::message_seconds): before the bulk rounds (so a send
/// cap's token bucket is full and paces none of it), three rounds in which every node at once sends
/// a burst of 64 messages of 64 bytes to rank + 1 and times it to the ack the same way; o = the
/// median over the bursts of (elapsed - 2 alpha - bytes / B) / 63, at least 0: the gap between
/// messages of a burst, what each message costs the CPUs of both ends (syscalls, wake-ups,
/// dispatch), which a cost model by bytes alone misses when many small messages share the cores
/// (PS's KV chunks on loopback).
///
/// Errors: a malformed probe message (unknown kind, wrong size, wrong round, a pong or ack no
/// one waits for, a bad profile) is dropped via LaneRouter::reject and counted there. A peer's
/// failure (LaneRouter::on_failure), a failed send, or a wait past its bound (timeout_s beyond what
/// the link was measured to need) makes the waiting call throw PeerError naming the rank and its
/// address (LaneRouter::address) and, for a timeout, the first rank whose answer is missing and
/// what was measured of its link so far.
///
/// Thread safety: construct before the transport starts (it routes "probe" and adds a failure
/// handler). measure_links(), exchange(), barrier() and report() from one thread at a time; they
/// block (condition variables with deadlines, no busy waiting). The handlers run on the delivery
/// thread and never block. The LaneRouter must outlive this object, and this object every handler
/// call.
class LinkProbe {
 public:
  /// Routes lane "probe" on `router`. Throws gradmesh::ContractError for bad options (printing
  /// the value) or when "probe" is already routed.
  LinkProbe(LaneRouter& router, LinkProbeOptions options);
  LinkProbe(const LinkProbe&) = delete;
  LinkProbe& operator=(const LinkProbe&) = delete;

  /// Every node calls it at once after the transport started. Measures alpha (seconds) and B
  /// (bytes/s) from this node to every peer and returns this node's row (times and GEMM rate
  /// left empty / 0 for the caller to fill). One node: zeros at once. Takes about budget_s at
  /// most on any link (see the class comment); a peer silent for timeout_s beyond what its link
  /// needs fails it. Throws PeerError (a failed or silent peer), ContractError with nodes > 1 and
  /// no transport.
  [[nodiscard]] NodeProfile measure_links();

  /// What the last measure_links() found on each link from this node (index = rank; own entry
  /// and, before any call, every entry default). Seconds it took: took_seconds().
  [[nodiscard]] const std::vector<LinkReport>& report() const noexcept { return report_; }
  /// Seconds the last measure_links() took (0 before any call).
  [[nodiscard]] double took_seconds() const noexcept { return took_seconds_; }
  /// The process's CPU time (std::clock: every thread, the kernel's work for it included) over
  /// the last measure_links()'s bulk rounds, per byte this node sent or received in them,
  /// seconds/byte: what the transport's copies cost at both ends of a link (0: one node, or no
  /// bulk byte). sync::NodeProfile::transport_seconds_per_byte scales it by the cores the node's
  /// compute gets.
  [[nodiscard]] double transport_cpu_seconds_per_byte() const noexcept {
    return transport_cpu_seconds_per_byte_;
  }

  /// Sends `local` (this node's profile: alpha and bandwidth of size n, forward and backward of
  /// equal size) to every peer and returns all n profiles (index = rank; entry rank() is `local`),
  /// identical on every node. Blocks at most timeout_s. Throws ContractError for a malformed
  /// `local`, PeerError for a failed or silent peer.
  [[nodiscard]] std::vector<NodeProfile> exchange(const NodeProfile& local);

  /// Returns once every node has called barrier() with the same `tag` (e.g. after each node routed
  /// its sync stage's handlers): a collective::Barrier whose round is the tag, so tags increase
  /// from call to call. Blocks at most timeout_s. Throws PeerError for a failed or silent peer,
  /// ContractError for a tag not above the previous call's.
  void barrier(std::uint64_t tag);

  /// The address of `rank` as the transport names it (LaneRouter::address), for logs.
  [[nodiscard]] std::string peer_address(std::size_t rank) const { return router_.address(rank); }

  /// The probe's lane id.
  [[nodiscard]] LaneId lane() const noexcept { return lane_; }

 private:
  using Clock = std::chrono::steady_clock;

  struct Incoming {              // the bulk transfers this node receives from one peer
    std::uint64_t expected = 0;  // bytes of the transfer under way (0: none)
    std::uint64_t received = 0;  // bytes of it so far
    std::uint64_t done = 0;      // kBulkDone received: sequences (rounds) over
    std::uint64_t awaited = 0;   // sequences this node's rounds have waited for so far
    std::uint64_t messages = 0;  // messages of the transfer under way so far
    Clock::time_point first_at;  // arrival of its first message
    Clock::time_point last_at;   // arrival of its latest message
    // from its second message on: each one's gap since the one before, and its bytes (reused)
    std::vector<std::pair<Clock::duration, std::size_t>> arrivals;
  };
  struct Outgoing {                  // the bulk transfers this node sends to one peer
    std::uint64_t started = 0;       // transfers begun
    std::uint64_t acked = 0;         // transfers acknowledged
    std::uint64_t bytes = 0;         // bytes of the transfer under way
    Clock::time_point acked_at;      // arrival of the last ack
    double receiver_seconds = 0;     // the last ack's: first to last message at the receiver
    double steady_seconds = 0;       // the last ack's: its steady part's time (0: none)
    std::uint64_t steady_bytes = 0;  // and bytes
  };
  struct Timing {                    // one transfer's times, seconds
    double sent_to_ack = 0;          // at the sender: from the first send to the ack's arrival
    double receiver = 0;             // at the receiver: from the first message to the last (0: one)
    double steady = 0;               // at the receiver: its steady part's time (0: none)
    std::uint64_t steady_bytes = 0;  // and bytes
  };

  void on_message(std::size_t from, net::Message&& message);
  void on_failure(const PeerError& error);
  void on_bulk(std::size_t from, const net::Message& message);
  void on_ack(std::size_t from, const net::Message& message);
  void on_done(std::size_t from, const net::Message& message);
  void on_profile(std::size_t from, net::Message&& message);

  void send(std::size_t peer, probe::Kind kind, std::uint64_t key, std::uint64_t round,
            net::Payload payload = {});
  double ping_peer(std::size_t peer);
  /// Measures the link to rank + round (fills report_[to]): growing transfers until one reaches
  /// the bound or the next would not fit before `budget_end` (before `overrun_end` while none has
  /// lasted target_seconds); then ends the round (end_round()).
  void measure_link(std::size_t round, const std::shared_ptr<std::vector<std::byte>>& buffer,
                    Clock::time_point budget_end, Clock::time_point overrun_end);
  /// One transfer: sends `total` bytes to rank + round in messages of `message_bytes` (views of
  /// `buffer`) and waits for the ack, `expected_s` (the time the link should need) plus timeout_s
  /// at most. Returns its times at both ends.
  Timing transfer(std::size_t round, const std::shared_ptr<std::vector<std::byte>>& buffer,
                  std::size_t message_bytes, std::uint64_t total, double expected_s);
  /// Tells rank + round that this node's transfers of `round` are over and waits until rank -
  /// round says the same of its own (`expected_s` plus timeout_s at most).
  void end_round(std::size_t round, double expected_s);
  /// Sends (kind, tag) to every peer and waits for one from each (consumed).
  /// Every node at the same point of measure_links() (a barrier of round `tag` on kPhase).
  void gate(std::uint64_t tag, const char* what);
  /// The text of a PeerError for `rank`, silent past `bound_s` while this node waited for `what`.
  [[nodiscard]] std::string silent_text(std::size_t rank, double bound_s,
                                        const std::string& what) const;
  /// Waits on `lock` until ready(); throws the stored failure, or after `bound_s` seconds a
  /// PeerError for the rank missing() names (with what was measured of its link).
  template <class Ready, class Missing>
  void wait(std::unique_lock<std::mutex>& lock, double bound_s, Ready ready, Missing missing,
            const std::string& what);
  /// bulk_bytes_received_ under the lock.
  [[nodiscard]] std::uint64_t bulk_bytes_received();
  /// What was measured of the link to `rank` so far, for errors ("" if nothing).
  [[nodiscard]] std::string measured_text(std::size_t rank) const;

  LaneRouter& router_;
  LinkProbeOptions options_;
  LaneId lane_;
  std::vector<LinkReport> report_;  // by rank; written by the caller's thread only
  double took_seconds_ = 0;
  double transport_cpu_seconds_per_byte_ = 0;
  std::uint64_t bulk_bytes_sent_ = 0;  // by transfer(), on the caller's thread

  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<PeerError> failure_;  // the first peer failure
  // This node's outstanding ping (one at a time).
  std::size_t ping_to_ = 0;
  std::uint64_t ping_key_ = 0;
  bool ping_waiting_ = false;
  Clock::time_point pong_at_;
  std::uint64_t next_ping_key_ = 1;
  std::uint64_t phases_ = 0;               // measure_links() calls so far
  std::vector<Incoming> incoming_;         // by sender rank
  std::uint64_t bulk_bytes_received_ = 0;  // bulk payload bytes accepted, all senders
  std::vector<Outgoing> outgoing_;         // by receiver rank
  collective::Barrier phase_gate_;  // kPhase: every node at the same point of measure_links()
  collective::Barrier barrier_;     // kBarrier: barrier()
  collective::AllGather profiles_;  // kProfile: exchange()
  std::uint64_t exchanges_ = 0;     // exchange() calls so far: the next one's round
};

}  // namespace gradmesh::sync
