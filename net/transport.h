#pragma once
// The TCP transport: a full mesh of one connection per pair of ranks on one libuv loop thread.

#include <cstddef>
#include <functional>
#include <memory>
#include <span>

#include "engine/error.h"
#include "net/counters.h"
#include "net/message.h"
#include "net/transport_options.h"

namespace gradmesh::net {

/// Moves tagged byte payloads (Message) between the ranks of a job; knows nothing of gradients.
///
/// Topology: rank i dials every rank j < i and accepts from every j > i; every connection starts
/// with a Hello / HelloAck handshake that checks protocol version, job name, config hash and the
/// peer list. Frames are prefix + verified FlatBuffers header + raw payload (net/frame.h).
///
/// Threads: one libuv event-loop thread per Transport owns every socket. send() and counters()
/// may be called from any thread; start(), shutdown() and the destructor from one owning thread.
/// Nothing throws on the loop thread: a peer's failure is stored as a PeerError, reported once
/// to the FailureHandler and rethrown by every later send() to that peer.
class Transport final {
 public:
  /// Called on the loop thread for every Data frame, in arrival order per peer. Must not block;
  /// an exception it throws is caught, counted as a malformed frame and logged.
  using MessageHandler = std::function<void(std::size_t from_rank, Message&& message)>;
  /// Called on the loop thread, once per peer that fails after its handshake (connection closed
  /// without Goodbye, socket error, unresyncable framing). Must not block.
  using FailureHandler = std::function<void(const PeerError& error)>;

  /// Validates `options`; throws gradmesh::ConfigError naming the bad field. Opens no socket.
  explicit Transport(TransportOptions options);
  /// Abrupt close (peers see the connection drop) if shutdown() was not called; joins the loop
  /// thread; never throws.
  ~Transport();

  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  /// Sets the handlers; call before start(). Either may be empty (messages / failures dropped).
  void set_handlers(MessageHandler on_message, FailureHandler on_failure);

  /// Listens on peers[rank] (SO_REUSEADDR, set by libuv), starts the loop thread, dials lower
  /// ranks (retrying with back-off 50 ms doubling to 1 s) and handshakes. Blocks until every peer
  /// is connected. Throws PeerError when a peer refuses us or we refuse it (the message carries the
  /// reason: what differs and both values), when we cannot listen, or after connect_timeout_s
  /// naming every missing rank and address. After a throw the Transport is closed; destroy it.
  void start();

  /// Queues `message` for `to_rank` and returns at once (non-blocking; the payload is shared,
  /// kept alive until written, not copied). Thread safe. Frames to one peer arrive in send order.
  /// Throws: PeerError (the stored one) if that peer failed; ContractError for a bad rank (own
  /// rank included) or stage; ProtocolError if the frame exceeds max_frame_bytes; Error before
  /// start() succeeded or after shutdown().
  void send(std::size_t to_rank, Message message);

  /// Test hook: writes `bytes` verbatim on the connection to `to_rank` (counted under "control"),
  /// to inject malformed frames. Same thread safety and errors as send().
  void send_raw_for_testing(std::size_t to_rank, std::span<const std::byte> bytes);

  /// Clean close: sends Goodbye to every live peer after its queued frames, waits up to
  /// `timeout_s` seconds for every peer's Goodbye (logging the ones that did not come), closes
  /// every socket and joins the loop thread. Peers that said Goodbye are not failures.
  /// Idempotent; never throws.
  void shutdown(double timeout_s = 10.0) noexcept;

  /// Abrupt close: stops the loop thread and closes every socket without Goodbye (peers see this
  /// node fail), so no handler runs after it returns; later send() calls throw gradmesh::Error.
  /// Idempotent; never throws. Use it on an error path, before destroying what handlers use.
  void close() noexcept;

  /// Abrupt close on an error, telling the peers why first: queues an Abort frame carrying `reason`
  /// to every live peer, waits (at most 1 s) for them to be written, then close(). A peer that
  /// receives it reports this node as failed with "aborted the job: <reason>", so the root cause
  /// (say, the peer that died first) is named everywhere. Idempotent; never throws.
  void abort(const std::string& reason) noexcept;

  /// Snapshot of the byte and frame counters. Thread safe.
  [[nodiscard]] Counters counters() const;

  /// This node's rank.
  [[nodiscard]] std::size_t rank() const noexcept;
  /// Number of ranks (peers.size()).
  [[nodiscard]] std::size_t size() const noexcept;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradmesh::net
