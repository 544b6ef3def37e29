#pragma once
// The in-process transport: every rank of a job is a Transport in one process, linked by mailboxes
// instead of sockets, so a sync stage can be unit-tested with its peers as threads (gloo's idea of
// one interface, several backends; STYLE.md practice 7).

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "net/transport.h"

namespace gradmesh::net {

namespace detail {
struct InProcMesh;
}

/// One rank of an in-process mesh (make_inproc_mesh()). Keeps net::Transport's contract:
///  - per-peer FIFO, exactly once; handlers run on this rank's own delivery thread (started by
///    start()), never on a sender's thread;
///  - the payload is shared until delivery, where it is copied into an owned buffer and the
///  sender's
///    reference dropped — as a socket write releases it, so pooled send buffers come back;
///  - byte counters count wire bytes as TCP would frame the message (net::encode_data), so traffic
///    predictions can be checked without sockets;
///  - close() or abort() make every other rank's FailureHandler see a PeerError naming this rank
///    (address "inproc:<rank>"), and their later sends to it throw it; shutdown() is a clean
///    goodbye: it waits (bounded) until every peer has shut down or closed too, delivering what
///    arrives meanwhile, and fails no one.
/// No framing errors (messages are objects), no scheduling: messages are delivered in plain send
/// order per peer (Message::priority and lane weights are ignored, as the ordering contract
/// allows). A link is instant unless set_link_rate() makes it a slow one, for tests of what waits
/// on the network.
/// Thread safety: as net::Transport.
class InProcTransport final : public Transport {
 public:
  /// Use make_inproc_mesh().
  InProcTransport(std::shared_ptr<detail::InProcMesh> mesh, std::size_t rank);
  /// close() unless shutdown() ran; joins the delivery thread; never throws.
  ~InProcTransport() override;

  void set_handlers(MessageHandler on_message, FailureHandler on_failure) override;
  /// Starts the delivery thread. Messages sent to this rank before are queued, not lost.
  /// Throws gradmesh::Error when called twice.
  void start() override;
  void send(std::size_t to_rank, Message message) override;
  /// Checks and stores the weights, and otherwise ignores them: a message is handed to its peer's
  /// mailbox at once, there is no link whose bandwidth lanes could share. Throws as
  /// Transport::set_lane_weights(). Thread safe.
  void set_lane_weights(std::vector<double> weights) override;
  /// The weights last given to set_lane_weights() (empty before).
  [[nodiscard]] std::vector<double> lane_weights() const;
  void shutdown(double timeout_s = 10.0) noexcept override;
  void close() noexcept override;
  /// The peers' PeerError does not carry `failed_peer` (in-process tests need no rollback).
  void abort_for(const std::string& reason,
                 std::optional<std::size_t> failed_peer) noexcept override;
  [[nodiscard]] Counters counters() const override;
  [[nodiscard]] std::size_t rank() const noexcept override { return rank_; }
  [[nodiscard]] std::size_t size() const noexcept override;
  [[nodiscard]] std::string peer_address(std::size_t rank) const override;

  /// Simulates a slow link from this rank to `to_rank`: each message is delivered no sooner than
  /// its wire bytes (net::encode_data) take at `bytes_per_second` after the previous message on
  /// that link (a serial link of that rate, store-and-forward, no latency). 0: instant (the
  /// default). Only that direction of that pair slows; the per-peer order holds, and messages
  /// from other ranks are not held up behind a slow one. Throws gradmesh::ContractError for a
  /// rank outside the mesh, its own rank, or a rate < 0 or not finite. Thread safe.
  void set_link_rate(std::size_t to_rank, double bytes_per_second);
  /// Adds `seconds` of latency to the link from this rank to `to_rank`: each message is delivered
  /// that much later than set_link_rate() alone would deliver it (as a message waiting in a
  /// queue on the way: a shaper's, behind other traffic). 0: none (the default). Per-peer order
  /// holds. Throws gradmesh::ContractError for a rank outside the mesh, its own rank, or seconds
  /// < 0 or not finite. Thread safe.
  void set_link_latency(std::size_t to_rank, double seconds);
  /// Cuts the link between this rank and `to_rank` in both directions, for good (a network
  /// partition, for tests of membership): messages between the two still queued are dropped,
  /// each side's FailureHandler sees a PeerError naming the other ("link cut"), and later sends
  /// between them throw it. Every other link is untouched. Idempotent. Throws
  /// gradmesh::ContractError for a rank outside the mesh or its own rank. Thread safe.
  void cut_link(std::size_t to_rank);

 private:
  void leave(bool clean, const std::string& reason) noexcept;

  std::shared_ptr<detail::InProcMesh> mesh_;
  std::size_t rank_;
};

/// `ranks` connected InProcTransports (index = rank), counting bytes under `lanes` (lane id =
/// index, < 255; "control" is appended as on TCP). Throws gradmesh::ContractError for 0 ranks or
/// too many lanes.
[[nodiscard]] std::vector<std::unique_ptr<InProcTransport>> make_inproc_mesh(
    std::size_t ranks, std::vector<std::string> lanes);

}  // namespace gradmesh::net
