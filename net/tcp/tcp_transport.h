#pragma once
// The TCP transport: a full mesh of one connection per pair of ranks on one libuv loop thread.

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "net/transport.h"
#include "net/transport_options.h"

namespace gradmesh::net {

/// net::Transport over TCP with libuv.
///
/// Topology: rank i dials every rank j < i and accepts from every j > i, listening on its own
/// peer-list address only. Every connection starts with the authentication of net/tcp/auth.h
/// (Challenges and a Proof: both ends prove TransportOptions::secret, or agree to have none; a
/// rank already connected is refused), then a Hello / HelloAck handshake that checks protocol
/// version, job name, config hash and the peer list. A refused inbound connection is logged
/// (rank, address, why) and counted (Counters::rejected_connections); one that never proved the
/// secret does not fail start(), which names it among the missing ranks at its timeout. Frames are
/// prefix + verified FlatBuffers header + raw payload (net/frame.h); with a secret and
/// TransportOptions::encrypt, every frame after the Challenges and the Proof goes sealed
/// (net/tcp/frame_cipher.h: header and payload encrypted, each followed by a tag; data in
/// fragments of at most 1 MiB), and one that does not verify fails its peer and is counted
/// (Counters::unverified_frames).
///
/// Sending: each connection writes one frame at a time (a frame that has started is finished before
/// another starts on that connection). The loop thread picks what to write next over all
/// connections: control frames (handshake, Abort, raw test bytes) first; then data frames by lane
/// share (set_lane_weights(): start-time fair queuing over lanes), ties by lower
/// Message::priority, then round-robin over peers; a connection's Goodbye goes after every data
/// frame queued before it, whatever their priority. With TransportOptions::max_send_rate frames go
/// in 64 KiB slices paced by one token bucket for the node, chosen slice by slice; uncapped a frame
/// goes in one write. A connection whose libuv write queue holds 256 KiB starts nothing more until
/// a write completes, so a frame of lower priority overtakes all but that, the frame being
/// written and what the kernel's socket buffer already holds.
///
/// Threads: one libuv event-loop thread per TcpTransport owns every socket and is the delivery
/// thread of net::Transport's contract.
class TcpTransport final : public Transport {
 public:
  /// Validates `options`; throws gradmesh::ConfigError naming the bad field. Opens no socket.
  explicit TcpTransport(TransportOptions options);
  /// Abrupt close (peers see the connection drop) if shutdown() was not called; joins the loop
  /// thread; never throws.
  ~TcpTransport() override;

  void set_handlers(MessageHandler on_message, FailureHandler on_failure) override;
  void set_rejoin_handler(RejoinHandler on_rejoin) override;

  /// Listens on peers[rank] (SO_REUSEADDR, set by libuv), starts the loop thread, dials lower
  /// ranks (retrying with back-off 50 ms doubling to 1 s) and handshakes. Blocks until every peer
  /// is connected. Throws PeerError when a peer refuses us or we refuse it (the message carries the
  /// reason: what differs and both values), when we cannot listen, or after connect_timeout_s
  /// naming every missing rank and address. After a throw the TcpTransport is closed; destroy it.
  /// Sets SIGPIPE to be ignored, process-wide: a write to a peer that died is an error on its
  /// connection (EPIPE), not the end of this process.
  void start() override;

  /// Queues `message` for `to_rank` and returns at once (the payload is kept alive until written,
  /// not copied). Order as net::Transport's contract (send order within a priority and lane).
  /// Throws as Transport::send(); the ProtocolError when the frame exceeds max_frame_bytes.
  void send(std::size_t to_rank, Message message) override;

  /// Posts the weights to the loop thread (applied before the frames sent after this call are
  /// queued). Thread safe; throws as Transport::set_lane_weights().
  void set_lane_weights(std::vector<double> weights) override;
  /// Data frames to rank r are cut into fragments of max(kMinFragmentBytes, its share of the
  /// link x TransportOptions::peer_timeout_s x kFragmentShare) payload bytes, its share being
  /// bytes_per_second[r] / (peers - 1) (every peer's traffic may share this node's one egress),
  /// capped by max_send_rate / (peers - 1). So a frame holds a connection for at most an eighth
  /// of the peer timeout and a control frame waits no longer (plus what libuv and the socket
  /// already hold: at most max(fragment, kMinFragmentBytes) in libuv's queue). No cut with
  /// peer_timeout_s = 0 or a rate of 0. Thread safe; applies to frames not yet started.
  void set_link_rates(std::vector<double> bytes_per_second) override;
  /// Fragment payload bytes for frames to `rank` (0: not cut). Thread safe.
  [[nodiscard]] std::size_t fragment_bytes(std::size_t rank) const;

  /// Test hook: writes `bytes` (not empty) verbatim on the connection to `to_rank` (counted under
  /// "control"), to inject malformed frames. A control frame: written before data frames not yet
  /// started. Same thread safety and errors as send(); ContractError for empty `bytes`.
  void send_raw_for_testing(std::size_t to_rank, std::span<const std::byte> bytes);

  /// Test hook: stops reading from `rank`'s connection (`paused`), or reads on: its bytes wait in
  /// the kernel, as on a link whose one direction has stalled, and its silence grows here only.
  /// Applied on the loop thread soon after the call; a connection made later reads. Thread safe.
  void pause_reading_for_testing(std::size_t rank, bool paused);

  /// Clean close: sends Goodbye to every live peer after its queued frames, waits up to
  /// `timeout_s` seconds for every peer's Goodbye (logging the ones that did not come), closes
  /// every socket and joins the loop thread. Peers that said Goodbye are not failures.
  void shutdown(double timeout_s = 10.0) noexcept override;

  /// Stops the loop thread and closes every socket without Goodbye.
  void close() noexcept override;

  /// Queues an Abort frame carrying `reason` to every live peer, waits (at most 1 s) for them to
  /// be written, then close().
  void abort_for(const std::string& reason,
                 std::optional<std::size_t> failed_peer) noexcept override;

  [[nodiscard]] Counters counters() const override;
  [[nodiscard]] std::size_t rank() const noexcept override;
  [[nodiscard]] std::size_t size() const noexcept override;
  [[nodiscard]] std::string peer_address(std::size_t rank) const override;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradmesh::net
