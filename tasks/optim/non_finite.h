#pragma once
// The non-finite guard (issue 59): where a NaN or an Inf first reached the model. A job whose loss
// or whose updates go non-finite trains on garbage from then on (every later iteration's loss is
// NaN, the test accuracy is chance), so the node checks, cheaply, at the places every value of an
// update passes through anyway: the optimizer's step (the summed gradient after it is decoded,
// fused into the update loop: sgd_update / adam_update's check_finite) and a received parameter
// copy (PS's pulls, copy_finite), and the training loop checks the loss of every iteration. The
// first finding stops the job (apps/pipeline: NonFiniteError; job.on_nonfinite).

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace gradmesh::tasks {

/// 1 when `x` is NaN or +-Inf (all its exponent bits set), else 0: an integer test that
/// vectorizes when OR-reduced over a loop (a float compare reduction would not, without
/// -ffast-math, which would also fold the test away).
[[nodiscard]] inline std::uint32_t non_finite_bit(float x) noexcept {
  return static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(x) & 0x7f800000u) == 0x7f800000u);
}

/// Whether every float of `values` is finite (no NaN, no +-Inf): one pass, an integer test of the
/// exponent bits OR-reduced (vectorized; no branch per float). Thread safety: as the array.
[[nodiscard]] bool all_finite(std::span<const float> values) noexcept;

/// std::copy of `from` into `to` (the same size; the caller's check) that also returns
/// all_finite(from), in the one pass the copy makes. Thread safety: as the arrays.
[[nodiscard]] bool copy_finite(std::span<const float> from, std::span<float> to) noexcept;

/// What the guard found first: a range of Model::parameters() floats whose update was not finite.
/// Plain value type.
struct NonFiniteFinding {
  std::size_t offset = 0;  ///< float offset of the range in Model::parameters()
  std::size_t size = 0;    ///< floats in the range
  std::size_t nan = 0;     ///< NaN among the values reported
  std::size_t inf = 0;     ///< +-Inf among them
  std::string what;        ///< what the values were: "the summed gradient", "the received ..."
};

/// The first non-finite update of a node, reported by whichever thread found it (a layer's sync
/// task, a KV shard's step, the transport's handler). Thread safety: report(), tripped() and
/// first() from any thread (first() is read between iterations). report() costs nothing until
/// something is found (the callers' checks are fused into passes they make anyway).
class NonFiniteGuard {
 public:
  /// Records `values` (the floats at [offset, offset + values.size()) of the model, or the values
  /// that were to update them) as found non-finite, described by `what`, unless an earlier report
  /// stands: counts their NaN and Inf (a second pass, on this failure path only). Never throws
  /// (out of memory: the finding keeps an empty `what`).
  void report(std::size_t offset, std::span<const float> values, std::string_view what) noexcept;
  /// Whether anything was reported. Any thread.
  [[nodiscard]] bool tripped() const noexcept { return tripped_.load(std::memory_order_acquire); }
  /// The first report, if any. (A job that rolls back builds a new Optimizer, so a new guard.)
  [[nodiscard]] std::optional<NonFiniteFinding> first() const;

 private:
  std::atomic<bool> tripped_{false};
  mutable std::mutex mutex_;
  std::optional<NonFiniteFinding> first_;
};

}  // namespace gradmesh::tasks
