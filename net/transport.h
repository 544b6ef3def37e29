#pragma once
// The transport interface (gloo's transport/device.h idea): moves tagged byte payloads between the
// ranks of a job and knows nothing of gradients. Backends: net/tcp/ (libuv TCP, what nodes use)
// and net/inproc/ (peers as threads of one process, for unit tests of the sync stages).

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/error.h"
#include "net/counters.h"
#include "net/message.h"

namespace gradmesh::net {

/// One rank's end of a full mesh of reliable, ordered links to every other rank.
///
/// Contract every backend keeps:
///  - Messages from one rank to another arrive each exactly once, or the sender's peer fails.
///  - Order: messages from one rank to another arrive in send order among messages of the same
///    priority and lane (Message::priority, Message::lane). A message of lower priority value
///    may overtake queued ones of higher value. Until set_lane_weights() is first called, the
///    lanes to one peer share one order (equal-priority messages arrive in send order whatever
///    their lane, as before priorities existed); from then on a message may also overtake queued
///    messages of other lanes, as the link is shared among lanes by weight. (The shared order
///    keeps callers that rely on it working: Ako's end-of-job marker, on its control lane, must
///    follow its partitions.) A backend may keep plain send order (net/inproc does).
///    shutdown()'s goodbye to a peer follows every message sent to it before, whatever their
///    priority. On TCP the handshake precedes all data, and a frame that has started being written
///    is finished before another starts on that connection (net/tcp/tcp_transport.h).
///  - Handlers run on one delivery thread per Transport (never on a sender's thread), in arrival
///    order per peer; they must not block. An exception a message handler throws is caught, counted
///    as a malformed frame and logged.
///  - A peer's failure is a value: it is reported once to the FailureHandler (a PeerError naming
///    the rank and address) and rethrown by every later send() to that peer, until the peer,
///    restarted, takes its rank back (TransportOptions::rejoin on its side; RejoinHandler here):
///    then sends work again, and a later failure is reported again. Nothing is thrown or aborted
///    on the delivery thread.
///  - The payload is shared, not copied, until the backend is done with it; a received payload is
///    an owned buffer.
///
/// Threads: send(), set_lane_weights() and counters() from any thread; set_handlers(), start(),
/// shutdown(), close(), abort() and the destructor from one owning thread.
class Transport {
 public:
  /// Called on the delivery thread for every data message, in arrival order per peer.
  using MessageHandler = std::function<void(std::size_t from_rank, Message&& message)>;
  /// Called on the delivery thread, once per peer that fails after it connected. Must not block.
  using FailureHandler = std::function<void(const PeerError& error)>;

  Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  virtual ~Transport() = default;

  /// Called on the delivery thread when a peer that failed restarted and took its rank back
  /// (TransportOptions::rejoin on its side): sends to it work again from then on, and a later
  /// failure of it is reported again. Must not block.
  using RejoinHandler = std::function<void(std::size_t rank)>;

  /// Sets the handlers; call before start(). Either may be empty (messages / failures dropped).
  virtual void set_handlers(MessageHandler on_message, FailureHandler on_failure) = 0;
  /// Sets the rejoin handler; call before start(). A backend that cannot take a failed peer back
  /// (net/inproc) ignores it: its failed peers stay failed.
  virtual void set_rejoin_handler(RejoinHandler on_rejoin) { (void)on_rejoin; }

  /// Connects to every peer; blocks until all are connected. Throws PeerError naming the rank and
  /// address of a peer that could not be reached or refused us (at the connect timeout), or, at
  /// once, of a peer that connected and then failed while every other peer is connected.
  virtual void start() = 0;

  /// Queues `message` for `to_rank` and returns at once (non-blocking). Thread safe.
  /// Throws: PeerError (the stored one) if that peer failed; ContractError for a bad rank (own
  /// rank included) or lane; ProtocolError if the message is too large; Error before start()
  /// succeeded or after close().
  virtual void send(std::size_t to_rank, Message message) = 0;

  /// Shares this node's send link among lanes by weight: `weights[s]` is lane s's weight
  /// (index = Message::lane); an entry of 0, or a lane past the end of `weights`, has weight 1.
  /// While several lanes have bytes waiting, each gets bytes in proportion to its weight; a lane
  /// alone gets the whole link (work-conserving: TransportOptions::max_send_rate, or the socket's
  /// speed when uncapped), and a lane that was idle banks no credit (Poseidon arXiv'15 sec. 4.3.3,
  /// the bandwidth manager; scheduled by start-time fair queuing, Goyal, Vin, Cheng, SIGCOMM'96).
  /// Also lets lanes overtake each other (see the ordering contract above).
  /// May be called at any time after construction, from any thread, and again to change weights.
  /// Throws gradmesh::ConfigError naming the lane index and value for a negative or non-finite
  /// weight, and for more weights than TransportOptions::lanes.
  virtual void set_lane_weights(std::vector<double> weights) = 0;

  /// The measured rate of the link to each peer, bytes/s (index = rank; this node's own entry and
  /// entries of 0 are ignored), e.g. from the start-up probe. A transport that writes one frame at
  /// a time on a connection uses it to bound how long one frame holds the link: a data message that
  /// would take longer than a fraction of the peer timeout at its share of that rate goes cut into
  /// fragments, so control frames (heartbeat answers, liveness answers, an Abort) go between them
  /// (net/tcp: TcpTransport). May be called at any time, from any thread, and again. Default:
  /// ignored (no link to share, as in-process).
  virtual void set_link_rates(std::vector<double> bytes_per_second) { (void)bytes_per_second; }

  /// Clean close: delivers what is queued, tells every peer goodbye and waits up to `timeout_s`
  /// seconds for theirs. Idempotent; never throws.
  virtual void shutdown(double timeout_s = 10.0) noexcept = 0;

  /// Abrupt close: no handler runs after it returns; peers see this node fail; later send() calls
  /// throw gradmesh::Error. Idempotent; never throws.
  virtual void close() noexcept = 0;

  /// Abrupt close on an error, telling the peers why first (each reports this node as failed with
  /// "aborted the job: <reason>"). Idempotent; never throws.
  void abort(const std::string& reason) noexcept { abort_for(reason, std::nullopt); }
  /// abort(), saying that this node stops because rank `failed_peer` failed: the peers' PeerError
  /// for this node then has PeerError::failed_peer() = it, so survivors that roll back agree on
  /// who is gone (apps/pipeline: run_with_recovery). Idempotent; never throws.
  virtual void abort_for(const std::string& reason,
                         std::optional<std::size_t> failed_peer) noexcept = 0;

  /// Snapshot of the byte and frame counters (wire bytes: prefix + header + payload). Thread safe.
  [[nodiscard]] virtual Counters counters() const = 0;

  /// This node's rank.
  [[nodiscard]] virtual std::size_t rank() const noexcept = 0;
  /// Number of ranks, this one included.
  [[nodiscard]] virtual std::size_t size() const noexcept = 0;
  /// Where rank `rank` is, as errors name it: "host:port" of its peer-list entry (net/tcp), or
  /// "in-process rank N" (net/inproc). Thread safe. Throws ContractError for a rank >= size().
  [[nodiscard]] virtual std::string peer_address(std::size_t rank) const = 0;
};

}  // namespace gradmesh::net
