#pragma once
// Strategies `ps` and `poseidon`: Poseidon's hybrid communication with wait-free backpropagation
// (Poseidon ATC'17 sec. 3.1 WFBP, sec. 3.2 HybComm, sec. 4.1 KV store and Algorithm 1
// BestScheme). `ps` is the same stage with SFB off.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "net/message.h"
#include "sync/channel.h"
#include "sync/layer_arrivals.h"
#include "sync/poseidon/sfb_layer.h"
#include "sync/ps/kv_shard.h"
#include "sync/sync_stage.h"
#include "topo/kv_placement.h"
#include "topo/poseidon_cost.h"

namespace gradmesh::sync {

/// One iteration, for each layer l with parameters (DESIGN.md's data-flow picture), by its scheme:
///
/// PS:  push_l (network task, right after backward_l) sends each KV chunk of l's gradient to its
///      owner — zero-copy views of the model's gradient buffer; the owner's KvShard counts the n
///      pushes (BSP), sums them in rank order, steps SGD on its master copy and broadcasts the
///      chunk; pull_l (deferred: holds no thread) ends when all of l's chunks are back.
/// SFB: sfb_send_l (network task, right after backward_l) broadcasts (U, V) to every peer;
///      sfb_wait_l (deferred) ends when all n pairs are in; sfb_apply_l rebuilds the mean dW with
///      one GEMM over the rank-ordered stack, derives db from U, and steps SGD locally.
///
/// Either way the update equals single-process SGD on the union of the n batches (mean loss),
/// and every replica holds the same parameters at the end of each iteration (BSP).
///
/// Buffer safety without copies (PS): a node's gradient buffer is rewritten only by the next
/// iteration's backward, which starts after every chunk came back — so after every owner fully read
/// this node's pushes; a shard's master chunk changes only after the next round's n pushes, which
/// each node sends only after it received this round's broadcast. SFB: see SfbLayer.
///
/// Errors: a peer failure fails the waiting tasks with the transport's PeerError (the run throws
/// it); a message that breaks the protocol is dropped, counted and logged.
class PoseidonStage final : public SyncStage {
 public:
  /// How SFB is used: never (strategy ps), for every dense layer, or per layer by BestScheme.
  enum class SfbMode : std::uint8_t { kNever, kAlways, kAuto };

  /// `name` is the strategy's name ("ps" or "poseidon"). Throws ConfigError for a bad
  /// sync.poseidon.sfb value.
  PoseidonStage(SyncContext context, std::string name, SfbMode mode);
  [[nodiscard]] std::string_view name() const noexcept override { return name_; }
  void build(engine::Graph& graph, const IterationTasks& tasks) override;
  [[nodiscard]] std::vector<LayerPlan> plan() const override;
  [[nodiscard]] std::uint64_t rejected_messages() const noexcept override {
    return channel_.rejected();
  }
  [[nodiscard]] const topo::KvPlacement& placement() const noexcept { return placement_; }
  [[nodiscard]] topo::Scheme scheme(std::size_t layer) const { return schemes_.at(layer); }

  /// Parses sync.poseidon.sfb ("auto", "always", "never"); throws ConfigError naming the key.
  [[nodiscard]] static SfbMode parse_sfb_mode(std::string_view text);

 private:
  void push_layer(std::size_t layer, std::uint64_t round);
  void send_factors(std::size_t layer, std::uint64_t round);
  void apply_factors(std::size_t layer, std::uint64_t round);
  void on_push(std::size_t from, net::Message&& message);
  void on_parameters(std::size_t from, net::Message&& message);
  void on_factors(std::size_t from, net::Message&& message);
  void on_failure(const PeerError& error);
  void accept_push(std::size_t from, std::size_t chunk, std::uint64_t round, net::Payload payload);
  void reduce_and_broadcast(std::size_t chunk, std::uint64_t round);
  void apply_parameters(std::size_t chunk, std::uint64_t round, std::span<const float> values,
                        std::size_t from);

  SyncContext ctx_;
  std::string name_;
  std::vector<topo::Scheme> schemes_;          // by layer (PS for layers without parameters)
  topo::KvPlacement placement_;                // PS layers only
  Channel channel_;
  StageId push_stage_ = 0, broadcast_stage_ = 0, sfb_stage_ = 0;
  KvShard shard_;
  LayerArrivals arrivals_;                     // PS layers: chunks back per round
  std::vector<std::unique_ptr<SfbLayer>> sfb_; // by layer; null unless SFB
};

}  // namespace gradmesh::sync
