#pragma once
// The parameter-server scheme for a set of layers: Poseidon's KV store colocated on every node with
// wait-free backpropagation (Poseidon ATC'17 sec. 3.1 WFBP, sec. 4.1 KV store and syncer).

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "net/payload.h"
#include "sync/lane_router.h"
#include "sync/layer_arrivals.h"
#include "sync/ps/kv_shard.h"
#include "sync/scheme.h"
#include "sync/sync_stage.h"
#include "topo/kv_placement.h"

namespace gradmesh::sync {

/// One iteration, for each of its layers l:
///   push_l (network task, right after backward_l) sends each KV chunk of l's gradient to its
///   owner — zero-copy views of the model's gradient buffer; the owner's KvShard counts the n
///   pushes (BSP), sums them in rank order, steps the node's optimizer on its master copy and
///   broadcasts the chunk; pull_l (deferred: holds no thread) ends when all of l's chunks are back.
/// The update equals single-process SGD on the union of the n batches (mean loss).
///
/// Buffer safety without copies: a node's gradient buffer is rewritten only by the next
/// iteration's backward, which starts after every chunk came back — so after every owner fully read
/// this node's pushes; a shard's master chunk changes only after the next round's n pushes, which
/// each node sends only after it received this round's broadcast.
///
/// Errors: fail_all() (a peer failure) fails the waiting tasks; a push that is sent to a failed
/// peer throws its PeerError from the push task; a message that breaks the protocol is rejected
/// through the router. Thread safety: build() before the first run; the rest from tasks and the
/// delivery thread (internally locked).
class PsScheme final : public Scheme {
 public:
  /// `layers`: the layers (with parameters) this scheme synchronises; `chunk_floats`: the KV chunk
  /// size. Routes the kv_push and kv_broadcast lanes on `router`.
  PsScheme(const SyncContext& ctx, LaneRouter& router, const std::vector<std::size_t>& layers,
           std::size_t chunk_floats);

  /// Adds push_l -> pull_l after tasks.backward[l], before tasks.done, for each of its layers.
  void build(engine::Graph& graph, const IterationTasks& tasks) override;
  /// Refreshes the KV shard's master copies from the replica after a checkpoint was loaded into
  /// it (KvShard::reload); reads nothing. Between iterations only.
  void load_state(engine::StateReader& in) override {
    (void)in;
    shard_.reload(ctx_.model.parameters());
  }
  /// Fails every waiting and later pull with `error`.
  void fail_all(std::exception_ptr error) override;
  /// "PS".
  [[nodiscard]] std::string describe(std::size_t layer) const override {
    (void)layer;
    return "PS";
  }

  [[nodiscard]] const topo::KvPlacement& placement() const noexcept { return placement_; }
  /// KV chunks of layer l (0 unless it is one of this scheme's layers).
  [[nodiscard]] std::size_t chunks(std::size_t layer) const override;
  /// Wire bytes this rank sends for layer l per iteration: its pushes to remote owners plus n - 1
  /// copies of each chunk it owns (payload + frame overhead). Over all nodes this averages
  /// Poseidon's 2MN(P1 + P2 - 2)/P2 floats (ATC'17 Table 1, P1 = P2 = n).
  [[nodiscard]] double bytes_sent(std::size_t layer) const override;

 private:
  void push_layer(std::size_t layer, std::uint64_t round);
  void on_push(std::size_t from, net::Message&& message);
  void on_parameters(std::size_t from, net::Message&& message);
  void accept_push(std::size_t from, std::size_t chunk, std::uint64_t round, net::Payload payload);
  void reduce_and_broadcast(std::size_t chunk, std::uint64_t round);
  void apply_parameters(std::size_t chunk, std::uint64_t round, std::span<const float> values,
                        std::size_t from);

  const SyncContext& ctx_;
  LaneRouter& router_;
  topo::KvPlacement placement_;
  LaneId push_lane_, broadcast_lane_;
  KvShard shard_;
  LayerArrivals arrivals_;
};

}  // namespace gradmesh::sync
