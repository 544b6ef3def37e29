#pragma once
// The end-of-job mean of data-parallel replicas, shared by the strategies whose replicas drift
// apart between exchanges: Ako's final average (Watcharapichat et al., SoCC'16, sec. 4: partial
// gradient exchange leaves replicas unequal) and local SGD's end inside a round (Lin et al.,
// ICLR'20, "Don't use large mini-batches, use local SGD": the model is the replicas' mean).

#include <cstddef>
#include <span>
#include <vector>

#include "engine/executor.h"
#include "sync/collective/ring_allreduce.h"
#include "tasks/model.h"

namespace gradmesh::sync {

/// One ring all-reduce of a node's replica: its m parameters followed by its layers' own state
/// (s floats: batch normalization's running statistics), m + s floats in one bucket.
///
/// Use: construct (copies the replica: the ring reduces its input in place, and a late arrival
/// may still write the model), reduce(), then write_back().
///
/// Thread safety: one thread (a stage's finish()); the ring's own tasks run on the executor.
class ReplicaAverage {
 public:
  /// Copies `model`'s parameters and layer states (host memory; allocated once, here).
  explicit ReplicaAverage(tasks::Model& model);

  /// m + s: the bucket size `ring` must have been built with.
  [[nodiscard]] std::size_t floats() const noexcept { return input_.size(); }

  /// Runs round 0 of `ring` on `executor`'s network arena as one task named `task`. Throws what
  /// the ring fails with (PeerError naming the rank it waited on).
  void reduce(engine::Executor& executor, collective::RingAllReduce& ring, const char* task);

  /// Writes the mean over `nodes` replicas of reduce()'s sum back into the model: the parameters
  /// when `parameters` (else they are left as they are: equal replicas), the layer states always.
  void write_back(const collective::RingAllReduce& ring, std::size_t nodes, bool parameters);

 private:
  tasks::Model& model_;
  std::size_t parameters_;
  std::vector<float> input_;
};

}  // namespace gradmesh::sync
