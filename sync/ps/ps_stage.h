#pragma once
// Strategy `ps`: bulk-synchronous parameter server over KV shards colocated on every node, with
// wait-free backpropagation (Poseidon ATC'17 sec. 3.1 and 4.1; Poseidon with SFB off).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "net/message.h"
#include "sync/layer_arrivals.h"
#include "sync/ps/kv_shard.h"
#include "sync/sync_stage.h"
#include "topo/kv_placement.h"

namespace gradmesh::sync {

/// One iteration, for each layer l with parameters (as in DESIGN.md's data-flow picture):
///  - push_l (network task, right after backward_l): sends each KV chunk of l's gradient to the
///    chunk's owner — zero-copy views of the model's gradient buffer;
///  - the owner's KvShard counts the n pushes (BSP), sums them in rank order, takes the SGD step on
///    its master copy and broadcasts the chunk's new parameters to every node;
///  - pull_l (network task, deferred: holds no thread) ends when all of l's chunks are back.
/// The update equals single-process SGD on the union of the n batches (mean loss).
///
/// Buffer safety without copies: a node's gradient buffer is rewritten only by the next
/// iteration's backward, which starts after every chunk came back — so after every owner received
/// (fully read) this node's pushes; a shard's master chunk changes only after the next round's n
/// pushes, which each node sends only after it received this round's broadcast.
///
/// Errors: a peer failure fails the waiting pull tasks with the transport's PeerError (the run
/// throws it); a message that breaks the protocol is dropped, counted and logged.
class PsStage final : public SyncStage {
 public:
  explicit PsStage(SyncContext context);
  [[nodiscard]] std::string_view name() const noexcept override { return "ps"; }
  void build(engine::Graph& graph, const IterationTasks& tasks) override;
  [[nodiscard]] std::vector<LayerPlan> plan() const override;
  [[nodiscard]] std::uint64_t rejected_messages() const noexcept override {
    return rejected_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] const topo::KvPlacement& placement() const noexcept { return placement_; }

 private:
  void push_layer(std::size_t layer, std::uint64_t round);
  void on_message(std::size_t from, net::Message&& message);
  void accept_push(std::size_t from, std::size_t chunk, std::uint64_t round, net::Payload payload);
  void reduce_and_broadcast(std::size_t chunk, std::uint64_t round);
  void apply_parameters(std::size_t chunk, std::uint64_t round, std::span<const float> values,
                        std::size_t from);
  void reject(std::size_t from, const std::string& why);

  SyncContext ctx_;
  topo::KvPlacement placement_;
  KvShard shard_;
  LayerArrivals arrivals_;
  std::atomic<std::uint64_t> rejected_{0};
};

/// The topo::ParameterBlocks of a model: one per layer with parameters.
[[nodiscard]] std::vector<topo::ParameterBlock> parameter_blocks(tasks::Model& model);

}  // namespace gradmesh::sync
