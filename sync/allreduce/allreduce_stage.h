#pragma once
// Strategy `allreduce`: ring all-reduce on merged buckets, overlapped with backpropagation — what
// Horovod and PyTorch DDP do, the baseline the other strategies are measured against (MG-WFBP
// sec. II-D and IV).

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "sync/allreduce/ring_allreduce.h"
#include "sync/channel.h"
#include "sync/sync_stage.h"
#include "topo/planner.h"

namespace gradmesh::sync {

/// Per iteration, for each bucket (a merge group of consecutive layers, topo::Plan::groups):
/// ar_start_g (network task, after the backward task of every layer in the bucket) starts the
/// bucket's RingAllReduce on the layers' gradients — one contiguous slice of Model::gradients(),
/// so merging costs no copy; ar_wait_g (deferred: holds no thread) ends when the sum is back;
/// ar_apply_g steps each layer of the bucket with the node's optimizer on sum / n. The update
/// equals single-process SGD on the union of the n batches (mean loss), and every replica holds
/// the same bits (the ring's sums are the same on every rank). With one node each layer steps on
/// its own gradient.
///
/// Buckets come from the planner (schemes = {all-reduce}): MG-WFBP's merge of layers whose
/// communication would start before the previous one ends (see topo/merge_planner.h for why the
/// planner uses an exact merge set rather than Algorithm 1 as printed).
///
/// Errors: a peer failure fails the waiting tasks with the transport's PeerError; a message that
/// breaks the protocol is dropped, counted and logged. Thread safety: as SyncStage.
class AllReduceStage final : public SyncStage {
 public:
  /// `plan`: a plan whose layers with parameters are all on all-reduce (or local with one node).
  AllReduceStage(SyncContext context, topo::Plan plan);
  [[nodiscard]] std::string_view name() const noexcept override { return "allreduce"; }
  void build(engine::Graph& graph, const IterationTasks& tasks) override;
  [[nodiscard]] std::vector<LayerPlan> plan() const override;
  [[nodiscard]] std::map<std::string, double> summary() const override;
  [[nodiscard]] std::uint64_t rejected_messages() const noexcept override {
    return channel_.rejected();
  }

 private:
  struct Bucket {
    std::size_t first = 0, last = 0;  // layers
    std::size_t offset = 0, floats = 0;
    std::unique_ptr<RingAllReduce> ring;  // null with one node
  };
  void apply(const Bucket& bucket, std::uint64_t round);
  void on_message(std::size_t from, net::Message&& message);

  SyncContext ctx_;
  topo::Plan plan_;
  Channel channel_;
  StageId stage_;
  std::vector<Bucket> buckets_;
};

}  // namespace gradmesh::sync
