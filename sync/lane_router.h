#pragma once
// The sync layer's view of the transport: frames routed by lane to the scheme that owns them, so
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

/// A lane id: the index of a lane name in lane_names(); net::Message::lane.
using LaneId = std::uint8_t;

/// Every lane any strategy uses, in registry order without repeats ("kv_push", "kv_broadcast",
/// "sf_broadcast", "allreduce", "ako_partition", ...): the transport's byte-counter lanes, the
/// same list (so the same ids) on every node. Defined by the registry (sync/registry.cpp).
[[nodiscard]] const std::vector<std::string>& lane_names();

/// The id of lane `name`. Throws gradmesh::ContractError for a name no strategy declares.
[[nodiscard]] LaneId lane_id(std::string_view name);

/// Bytes one data frame of `lane` and `kind` puts on the socket besides its payload (prefix +
/// FlatBuffers header), for predicting traffic. `keyed`: the frames carry a key other than 0
/// (FlatBuffers leaves a field at its default out: an all-gather's frames, key 0, are smaller).
/// Thread-safe.
[[nodiscard]] double frame_overhead_bytes(LaneId lane, std::uint16_t kind, bool keyed = true);

/// Routes a transport's messages to per-lane handlers and sends with peer errors as values.
///
/// Made by the node before the transport starts (it installs the transport's handlers), one per
/// node; the start-up probe and the sync stage's schemes route() their lanes on it. A message for
/// a lane no one routed (yet) is rejected: a node routes its lane before the start-up barrier
/// that its peers wait for before they send. With no transport (one node, `gradmesh-node plan`)
/// routing works and sending is a contract error.
///
/// Thread safety: every member may be called from any thread; route() and on_failure() may be
/// called while the transport delivers (a handler, once routed, stays until the LaneRouter dies).
/// Handlers run on the transport's delivery thread (must not block); a handler's exception is the
/// transport's to count as malformed.
class LaneRouter {
 public:
  using Handler = std::function<void(std::size_t from, net::Message&& message)>;
  using FailureHandler = std::function<void(const PeerError& error)>;

  /// `transport` may be nullptr; else it must outlive the LaneRouter, and the LaneRouter must
  /// outlive every handler call (close the transport before destroying the lane that owns the
  /// LaneRouter).
  LaneRouter(net::Transport* transport, std::size_t rank, std::size_t nodes);
  LaneRouter(const LaneRouter&) = delete;
  LaneRouter& operator=(const LaneRouter&) = delete;

  /// Routes lane `name`'s messages to `handler` and returns its id. Throws
  /// gradmesh::ContractError for an unknown name or a lane already routed.
  LaneId route(std::string_view name, Handler handler);

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

  /// Shares this node's send link among lanes by the bytes each sends per iteration
  /// (`bytes_by_lane`: lane name -> bytes, e.g. topo::Plan::lane_bytes): while lanes are
  /// backlogged on one link, their bytes follow these weights (net::Transport::set_lane_weights,
  /// Poseidon arXiv'15 sec. 4.3.3). A lane not named, or of 0 bytes, keeps weight 1. Once set,
  /// messages of different lanes to one peer no longer keep their send order: call it only when
  /// no routed lane relies on that order (Ako's end-of-job exchange does). No-op without a
  /// transport. Throws gradmesh::ContractError for an unknown lane name, ConfigError for a
  /// negative or non-finite value.
  void set_lane_weights(const std::map<std::string, double, std::less<>>& bytes_by_lane);

  /// Each peer's link rate, bytes/s (index = rank; 0: unknown), which bounds how long one frame
  /// may hold that link (net::Transport::set_link_rates). No-op without a transport. Throws as
  /// net::Transport::set_link_rates().
  void set_link_rates(std::vector<double> bytes_per_second);

  /// Counts and logs a message from `from` that broke `lane`'s protocol (dropped by the caller).
  void reject(std::size_t from, LaneId lane, const std::string& why);

  /// Messages rejected so far (reject(), and messages of unrouted lanes).
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
  std::unique_ptr<std::atomic<Handler*>[]> handlers_;  // by lane id; set once (release)
  std::size_t stages_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<FailureHandler>> failure_handlers_;  // under mutex_
  std::vector<std::shared_ptr<RejoinHandler>> rejoin_handlers_;    // under mutex_
  std::atomic<std::uint64_t> rejected_{0};
};

/// Throws the first of `errors`, if any (BSP schemes: a failed peer fails the iteration).
void throw_first(const std::vector<PeerError>& errors);

}  // namespace gradmesh::sync
