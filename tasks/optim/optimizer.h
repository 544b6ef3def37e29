#pragma once
// The node's one optimizer state: the SGD rule (tasks/optim/sgd.h) plus one momentum buffer for the
// whole model, in Model::parameters() layout. Every sync scheme steps through it — a layer after
// its gradient is final (none, SFB, all-reduce), a KV chunk's master copy on its owner (PS), the
// local replica (Ako) — so a job has one velocity per parameter whatever scheme each layer uses.
// On a device model, the ranges of layers that are updated on the device (SFB's layers) keep their
// velocity in device memory instead (keep_on_device): still one velocity per parameter, in one
// place.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "engine/checkpoint.h"
#include "tasks/backend.h"
#include "tasks/optim/adam.h"
#include "tasks/optim/non_finite.h"
#include "tasks/optim/sgd.h"

namespace gradmesh::tasks {

/// SGD with momentum and weight decay, or Adam / AdamW (tasks/optim/adam.h), over a model of
/// `parameter_count` floats: the node's one optimizer state, whatever scheme steps a range. Under
/// PS the KV shard's owner steps its chunks with it, so Adam's moments are sharded with the KV
/// chunks as the velocity is.
///
/// `offset` arguments are float offsets into Model::parameters() (Model::parameter_offset(l) for
/// a layer, KvChunk::offset for a KV chunk): the velocity used is velocity()[offset, offset +
/// w.size()). The parameters `w` need not be the model's own (a KV shard steps its master copy).
///
/// Device ranges: keep_on_device(backend, offset, size) moves the velocity of one range (a layer
/// that a sync stage updates on the device, Poseidon's SFB) into that backend's device memory;
/// from then on only step_on_device() steps that range, on device parameters and gradients
/// (Model::device_layer_parameters / device_layer_gradients), and host steps that touch it are
/// errors, so no parameter ever has two velocities.
///
/// Learning rate: every step uses lr(), which set_lr() changes (a schedule, tasks/optim/
/// lr_schedule.h, sets it before each iteration); it starts at the options' lr.
///
/// Thread safety: host calls on disjoint [offset, offset + size) ranges may run concurrently
/// (layers step on different tasks, chunks on different threads). keep_on_device() only at
/// set-up, before any step; step_on_device() from the thread that drives the backend (the
/// Model's). No allocation after set-up.
///
/// Checkpoints (engine::Checkpointable; Poseidon arXiv'15 sec. 4.4, "all model/solver states"): the
/// state is the velocity of every parameter, host and device ranges alike (device ranges are
/// downloaded to save and uploaded on load). Under PS a node's velocity of the KV chunks it owns
/// is the shard's solver state; of the other chunks it is unused, and saved all the same. Adam
/// writes its second moment after the first (an SGD checkpoint's form is unchanged).
class Optimizer final : public engine::Checkpointable {
 public:
  /// Throws gradmesh::ConfigError naming the option for a bad lr, momentum or weight decay.
  /// `adam`: Adam or AdamW (tasks/optim/adam.h) instead of SGD: options.lr and .weight_decay
  /// still apply, .momentum does not; the state is then the first moment (velocity()) and the
  /// second, and each step's bias correction uses set_step()'s t. Throws ConfigError naming
  /// optimizer.beta1 / .beta2 / .eps for a value out of range.
  Optimizer(SgdOptions options, std::size_t parameter_count,
            std::optional<AdamOptions> adam = std::nullopt);

  /// Adam or AdamW (else SGD with momentum).
  [[nodiscard]] bool adam() const noexcept { return adam_.has_value(); }
  /// The Adam options (adam() only).
  [[nodiscard]] const std::optional<AdamOptions>& adam_options() const noexcept { return adam_; }
  /// Adam's step t (1-based) for the bias corrections of the steps from now on: the job's
  /// iteration + 1, set between iterations as set_lr (every range steps once an iteration under
  /// the BSP strategies). Default 1. Ignored by SGD. Thread-safe (an atomic store).
  void set_step(std::uint64_t t) noexcept { t_.store(t == 0 ? 1 : t, std::memory_order_relaxed); }

  /// w -= lr v, v = mu v + g + wd w (Sgd::step) with the velocity at `offset` (Adam: adam_update
  /// with the moments at `offset`). Throws
  /// gradmesh::ContractError when sizes differ, the range leaves the model or it overlaps a range
  /// kept on the device.
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

  /// Keeps the velocity of [offset, offset + size) on `backend`'s device from now on: allocates
  /// `size` floats of device memory there (the one allocation) and copies the host slice in (all
  /// zero before the first step). The host slice of velocity() is not used for the range after
  /// this. Set-up only. `backend` must outlive the optimizer's steps (the Model's backend: the
  /// node makes the Model before the Optimizer). Throws gradmesh::ContractError when the range
  /// is empty, leaves the model or overlaps one already kept on a device; DeviceError when the
  /// device is out of memory.
  void keep_on_device(Backend& backend, std::size_t offset, std::size_t size);

  /// Sgd::step on the device (Backend::sgd_step, enqueued on the backend's stream; bitwise the
  /// host step on the CPU backend): w and g are w.size() floats of the backend's device memory,
  /// and [offset, offset + w.size()) must be exactly a range given to keep_on_device(), whose
  /// device velocity it uses. Thread safety: the backend's (one thread). Throws
  /// gradmesh::ContractError for sizes that differ or a range not kept on the device; DeviceError
  /// when the kernel fails to launch.
  void step_on_device(std::size_t offset, std::span<float> w, std::span<const float> g);

  /// optimizer.weight_decay_exclude: no weight decay on the floats of `ranges`, (offset, size)
  /// pairs, ascending and disjoint (Model::weight_decay_exempt(): biases and batch
  /// normalization's gamma and beta: "no bias decay", He et al., "Bag of Tricks for Image
  /// Classification with Convolutional Neural Networks", CVPR'19, sec. 3.1). Set-up only, before
  /// any step. Every
  /// step() / step_sum() / step_on_device() then splits its range where the decay changes, and a
  /// scheme that applies the decay itself (Ako, DGC's correction) asks for_each_decay_segment().
  /// Throws gradmesh::ContractError for ranges out of order, overlapping or leaving the model.
  void exempt_from_weight_decay(std::vector<std::pair<std::size_t, std::size_t>> ranges);

  /// Calls fn(begin, end, weight_decay) for the consecutive segments of [offset, offset + size)
  /// (begin and end relative to offset) with one weight decay each: the options' (of the rate
  /// in force), or 0 inside an exempt range. One call with the options' decay when nothing is
  /// exempt. Thread-safe (reads set-up state only).
  template <typename Fn>
  void for_each_decay_segment(std::size_t offset, std::size_t size, Fn&& fn) const {
    const float decay = sgd_.options().weight_decay;
    std::size_t at = offset;
    const std::size_t end = offset + size;
    auto it = std::lower_bound(exempt_.begin(), exempt_.end(), offset,
                               [](const std::pair<std::size_t, std::size_t>& r, std::size_t o) {
                                 return r.first + r.second <= o;
                               });
    for (; it != exempt_.end() && it->first < end; ++it) {
      const std::size_t begin = std::max(it->first, at),
                        stop = std::min(it->first + it->second, end);
      if (begin > at) fn(at - offset, begin - offset, decay);
      fn(begin - offset, stop - offset, 0.0f);
      at = stop;
    }
    if (at < end || size == 0) fn(at - offset, end - offset, decay);
  }

  /// The options with the learning rate in force now (lr()).
  [[nodiscard]] SgdOptions options() const noexcept {
    SgdOptions o = sgd_.options();
    o.lr = lr();
    return o;
  }
  /// The learning rate the next step uses. Thread-safe (an atomic load).
  [[nodiscard]] float lr() const noexcept { return lr_.load(std::memory_order_relaxed); }
  /// Sets the learning rate of the steps from now on (>= 0, finite; else
  /// gradmesh::ContractError). Call between iterations, while no step of this node's iteration
  /// runs: a step that runs concurrently (Ako's receiver) uses the old or the new rate, whole.
  void set_lr(float lr);
  /// The non-finite guard (tasks/optim/non_finite.h, issue 59): every host step (step(),
  /// step_sum(); not step_plain()) tests the parameters it writes in its update loop and, when one
  /// is NaN or Inf, reports its range to non_finite() (what: "the summed gradient" when the
  /// gradient holds the NaN or Inf, else "the parameters after the step": an overflow). On by
  /// default; set-up only. Steps on a device (step_on_device) are not checked: the training loop's
  /// loss check sees them one iteration later.
  void set_non_finite_check(bool on) noexcept {
    check_finite_ = on;
    sgd_ = Sgd(sgd_.options(), on);
    undecayed_ = Sgd(undecayed_.options(), on);
  }
  [[nodiscard]] bool non_finite_check() const noexcept { return check_finite_; }
  /// Where the first non-finite update of this node was found (the steps' reports, and a
  /// scheme's own: a received parameter copy). Thread safety: NonFiniteGuard's.
  [[nodiscard]] NonFiniteGuard& non_finite() noexcept { return non_finite_; }

  /// The host momentum buffer, Model::parameters() layout (floats). Ranges kept on a device hold
  /// the values they had when they moved there.
  [[nodiscard]] std::span<float> velocity() noexcept { return velocity_; }

  /// Writes the velocity (m floats, Model::parameters() layout). Call while no step runs.
  void save_state(engine::StateWriter& out) override;
  /// Replaces the velocity; throws CheckpointError for another parameter count.
  void load_state(engine::StateReader& in) override;

 private:
  /// A velocity range kept in a backend's device memory.
  struct DeviceRange {
    Backend* backend;
    std::size_t offset;
    Buffer<float> velocity;  // device memory, velocity.size() floats (Adam: the first moment)
    Buffer<float> second;    // Adam: the second moment there; empty for SGD
  };
  /// After a step whose update loop found a non-finite parameter in [offset, offset + w.size()):
  /// reports g (or, when g is finite, w: the update overflowed) to non_finite_.
  void report_non_finite(std::size_t offset, std::span<const float> w, std::span<const float> g);
  /// Adam on host floats [offset, offset + w.size()) with gradient g.
  void adam_step(std::size_t offset, std::span<float> w, std::span<const float> g);

  [[nodiscard]] std::span<float> velocity_at(std::size_t offset, std::size_t size);

  Sgd sgd_;
  Sgd undecayed_;  // sgd_'s options without weight decay (the exempt ranges)
  std::vector<std::pair<std::size_t, std::size_t>> exempt_;  // (offset, size), ascending
  std::atomic<float> lr_;
  std::vector<float> velocity_;
  std::vector<DeviceRange> device_;  // set up by keep_on_device(); few entries (one per layer)
  std::optional<AdamOptions> adam_;
  std::vector<float> second_;  // Adam's second moment (empty for SGD)
  std::atomic<std::uint64_t> t_{1};
  bool check_finite_ = true;
  NonFiniteGuard non_finite_;
};

}  // namespace gradmesh::tasks
