#pragma once
// The sync layer's view of the transport: frames routed by stage to the scheme that owns them, so
// several schemes (PS, SFB, all-reduce, Ako) share one transport in one job — per layer if the
// plan says so (DESIGN.md "Strategies share one transport").

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/error.h"
#include "net/message.h"

namespace gradmesh::net {
class Transport;
}

namespace gradmesh::sync {

/// A stage id: the index of a stage name in stage_names(); net::Message::stage.
using StageId = std::uint8_t;

/// Every stage any strategy uses, in registry order without repeats ("kv_push", "kv_broadcast",
/// "sf_broadcast", "allreduce", "ako_partition", ...): the transport's byte-counter stages, the
/// same list (so the same ids) on every node. Defined by the registry (sync/registry.cpp).
[[nodiscard]] const std::vector<std::string>& stage_names();

/// The id of stage `name`. Throws gradmesh::ContractError for a name no strategy declares.
[[nodiscard]] StageId stage_id(std::string_view name);

/// Bytes one data frame of `stage` and `kind` puts on the socket besides its payload (prefix +
/// FlatBuffers header), for predicting traffic. Thread-safe.
[[nodiscard]] double frame_overhead_bytes(StageId stage, std::uint16_t kind);

/// Routes a transport's messages to per-stage handlers and sends with peer errors as values.
///
/// Made by the node before the transport starts (it installs the transport's handlers), one per
/// node; the start-up probe and the sync stage's schemes route() their stages on it. A message for
/// a stage no one routed (yet) is rejected: a node routes its stage before the start-up barrier
/// that its peers wait for before they send. With no transport (one node, `gradmesh-node plan`)
/// routing works and sending is a contract error.
///
/// Thread safety: every member may be called from any thread; route() and on_failure() may be
/// called while the transport delivers (a handler, once routed, stays until the Channel dies).
/// Handlers run on the transport's delivery thread (must not block); a handler's exception is the
/// transport's to count as malformed.
class Channel {
 public:
  using Handler = std::function<void(std::size_t from, net::Message&& message)>;
  using FailureHandler = std::function<void(const PeerError& error)>;

  /// `transport` may be nullptr; else it must outlive the Channel, and the Channel must outlive
  /// every handler call (close the transport before destroying the stage that owns the Channel).
  Channel(net::Transport* transport, std::size_t rank, std::size_t nodes);
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  /// Routes stage `name`'s messages to `handler` and returns its id. Throws
  /// gradmesh::ContractError for an unknown name or a stage already routed.
  StageId route(std::string_view name, Handler handler);

  /// Adds a handler told of every peer failure (each scheme fails its waiting tasks with it).
  void on_failure(FailureHandler handler);
  using RejoinHandler = std::function<void(std::size_t rank)>;
  /// Adds a handler told when a failed peer restarted and took its rank back
  /// (net::Transport::RejoinHandler; only the TCP transport does this).
  void on_rejoin(RejoinHandler handler);

  /// Sends `message` to `peer` (not this rank). A failed peer is returned as a value (the failure
  /// handlers hear of it from the transport too); other errors throw as net::Transport::send().
  [[nodiscard]] std::optional<PeerError> send(std::size_t peer, net::Message message);

  /// send() to every other rank, sharing the payload (no copy). Returns the peers that failed.
  [[nodiscard]] std::vector<PeerError> broadcast(const net::Message& message);

  /// Shares this node's send link among stages by the bytes each sends per iteration
  /// (`bytes_by_stage`: stage name -> bytes, e.g. topo::Plan::stage_bytes): while stages are
  /// backlogged on one link, their bytes follow these weights (net::Transport::set_stage_weights,
  /// Poseidon arXiv'15 sec. 4.3.3). A stage not named, or of 0 bytes, keeps weight 1. Once set,
  /// messages of different stages to one peer no longer keep their send order: call it only when
  /// no routed stage relies on that order (Ako's end-of-job exchange does). No-op without a
  /// transport. Throws gradmesh::ContractError for an unknown stage name, ConfigError for a
  /// negative or non-finite value.
  void set_stage_weights(const std::map<std::string, double, std::less<>>& bytes_by_stage);

  /// Each peer's link rate, bytes/s (index = rank; 0: unknown), which bounds how long one frame
  /// may hold that link (net::Transport::set_link_rates). No-op without a transport. Throws as
  /// net::Transport::set_link_rates().
  void set_link_rates(std::vector<double> bytes_per_second);

  /// Counts and logs a message from `from` that broke `stage`'s protocol (dropped by the caller).
  void reject(std::size_t from, StageId stage, const std::string& why);

  /// Messages rejected so far (reject(), and messages of unrouted stages).
  [[nodiscard]] std::uint64_t rejected() const noexcept;

  [[nodiscard]] bool connected() const noexcept { return transport_ != nullptr; }
  /// Where `rank` is, for errors: net::Transport::peer_address(), or "rank N" with no transport.
  [[nodiscard]] std::string address(std::size_t rank) const;
  [[nodiscard]] std::size_t rank() const noexcept { return rank_; }
  [[nodiscard]] std::size_t nodes() const noexcept { return nodes_; }

 private:
  void dispatch(std::size_t from, net::Message&& message);
  void fail(const PeerError& error);
  void rejoined(std::size_t rank);

  net::Transport* transport_;
  std::size_t rank_;
  std::size_t nodes_;
  std::vector<std::unique_ptr<Handler>> owned_;        // under mutex_
  std::unique_ptr<std::atomic<Handler*>[]> handlers_;  // by stage id; set once (release)
  std::size_t stages_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<FailureHandler>> failure_handlers_;  // under mutex_
  std::vector<std::shared_ptr<RejoinHandler>> rejoin_handlers_;    // under mutex_
  std::atomic<std::uint64_t> rejected_{0};
};

/// Throws the first of `errors`, if any (BSP schemes: a failed peer fails the iteration).
void throw_first(const std::vector<PeerError>& errors);

}  // namespace gradmesh::sync
