#pragma once
// The node's one optimizer state: the SGD rule (tasks/optim/sgd.h) plus one momentum buffer for the
// whole model, in Model::parameters() layout. Every sync scheme steps through it — a layer after
// its gradient is final (none, SFB, all-reduce), a KV chunk's master copy on its owner (PS), the
// local replica (Ako) — so a job has one velocity per parameter whatever scheme each layer uses.

#include <cstddef>
#include <span>
#include <vector>

#include "tasks/optim/sgd.h"

namespace gradmesh::tasks {

/// SGD with momentum and weight decay over a model of `parameter_count` floats.
///
/// `offset` arguments are float offsets into Model::parameters() (Model::parameter_offset(l) for
/// a layer, KvChunk::offset for a KV chunk): the velocity used is velocity()[offset, offset +
/// w.size()). The parameters `w` need not be the model's own (a KV shard steps its master copy).
///
/// Thread safety: calls on disjoint [offset, offset + size) ranges may run concurrently (layers
/// step on different tasks, chunks on different threads); no allocation after construction.
class Optimizer {
 public:
  /// Throws gradmesh::ConfigError naming the option for a bad lr, momentum or weight decay.
  Optimizer(SgdOptions options, std::size_t parameter_count);

  /// w -= lr v, v = mu v + g + wd w (Sgd::step) with the velocity at `offset`. Throws
  /// gradmesh::ContractError when sizes differ or the range leaves the model.
  void step(std::size_t offset, std::span<float> w, std::span<const float> g);

  /// Sums `grads` in the given order (the same bits on every node), scales by `scale` (1/n: the
  /// mean over n nodes' batches), then step(). `scratch` (w.size() floats) is left holding the
  /// scaled sum. Errors as step() and Sgd::step_sum().
  void step_sum(std::size_t offset, std::span<float> w,
                std::span<const std::span<const float>> grads, float scale,
                std::span<float> scratch);

  /// Plain SGD with no momentum, Ako SoCC'16 Algorithm 1 line 5: g += wd w (so a gradient that is
  /// sent on carries the decay), then w -= lr g. The velocity is neither read nor written.
  void step_plain(std::span<float> w, std::span<float> g) const;

  [[nodiscard]] const SgdOptions& options() const noexcept { return sgd_.options(); }
  /// The momentum buffer, Model::parameters() layout (floats).
  [[nodiscard]] std::span<float> velocity() noexcept { return velocity_; }

 private:
  [[nodiscard]] std::span<float> velocity_at(std::size_t offset, std::size_t size);

  Sgd sgd_;
  std::vector<float> velocity_;
};

}  // namespace gradmesh::tasks
