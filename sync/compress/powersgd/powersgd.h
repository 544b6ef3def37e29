#pragma once
// PowerSGD's rank-r approximation of one gradient matrix (issue 28; docs/compression.md): the
// arithmetic a node runs around the two all-reduces of P and Q, without the networking.
//
// Source: Vogels, Karimireddy, Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for
// Distributed Optimization" (NeurIPS'19), Alg. 1 (one step of subspace iteration with a warm
// start: P = M Q, P_hat = ORTHOGONALIZE(sum P), Q = M^T P_hat, out = P_hat (mean Q)^T) and Alg. 2
// (error feedback: M = g + e). As PyTorch's torch/distributed/algorithms/ddp_comm_hooks/
// powerSGD_hook.py: the warm-start Q is orthonormalized before each step, P is summed rather than
// averaged (ORTHOGONALIZE does not see the scale) and the residual is the local M minus the
// aggregated approximation.
//
// One step, on every node, for one matrix (floats; n nodes; r = rank()):
//   compute_p        M = g + e (rows x cols); P = M Q (rows x r), then all-reduced (sum)
//   compute_q        P_hat = orthonormal columns of sum P; Q = M^T P_hat (cols x r), all-reduced
//   decompress_each  Q_mean = sum Q / n; out = P_hat Q_mean^T and e = M - out, a block of rows
//                    at a time, each block handed to the caller; Q = orth(Q_mean)
// Bytes on the wire per node and step: 4 (rows + cols) r, against 4 rows cols uncompressed.

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "engine/checkpoint.h"

namespace gradmesh::sync::compress {

/// A column whose norm after its projections is at most this share of its norm before them is
/// in the span of the columns before it (to float rounding) and becomes zero instead of a unit
/// column. Relative, so the decision does not depend on the gradient's scale (PyTorch's hook
/// divides by the norm plus an absolute epsilon instead, which shrinks a column whose norm is
/// near that epsilon rather than normalizing it).
/// Why 1e-6: with two passes of projection (see PowerSgd) a column of an exhausted span keeps
/// about 1e-14 of its norm, far below; a column that only rounding made independent (P of a
/// rank-deficient M, ~1e-7 .. 1e-5 of its norm after a float GEMM) may land on either side, and
/// either outcome is harmless: zero, or a unit column orthogonal to the others to float
/// precision, so that P_hat P_hat^T stays an orthogonal projection.
inline constexpr double kOrthogonalizeEpsilon = 1e-6;

/// Modified Gram-Schmidt over the `cols` columns of the row-major rows x cols `matrix`, in place,
/// left to right, each column projected twice against the ones before it ("twice is enough":
/// Giraud, Langou, Rozloznik, 2005) so the result is orthonormal to float precision even when
/// the columns are nearly dependent. A column whose norm after projection is at most
/// kOrthogonalizeEpsilon of its norm before becomes zero (never NaN: M of rank < r, M = 0).
/// Dot products and norms in double, sequentially: the same input bits give the same output bits
/// on every node (no BLAS, no threads). Returns the number of columns that became zero. No
/// allocation. Throws ContractError when matrix.size() != rows cols.
std::size_t orthonormalize_columns(std::span<float> matrix, std::size_t rows, std::size_t cols);

/// PowerSGD of one gradient matrix M (rows x cols floats, row-major: a dense layer's weight
/// gradient, or a conv kernel viewed as out_channels x (in_channels kh kw)), rank r.
///
/// Each step is compute_p(), the caller's sum of P over the nodes, compute_q(), the sum of Q,
/// decompress(); every node runs the same steps with the same seed, and the sums must be the same
/// bits on every node (a ring all-reduce gives that). Then every node's `out` is the same bits,
/// P_hat P_hat^T mean(M): the mean gradient projected on the r-dimensional column space found by
/// one power iteration from the warm start. With r >= min(rows, cols) it is the mean gradient
/// itself (to float rounding). Bit-identical results across machines assume the same BLAS kernel
/// (tasks::cpu::sgemm) on each; the orthonormalization is our own sequential code.
///
/// Error feedback (Alg. 2): M = gradient + e, and after decompress e = M - out, the local M minus
/// the aggregated approximation, as PyTorch's hook (the paper subtracts the local approximation
/// P_hat P_hat^T M instead). The two residuals have the same mean over the nodes, and P_hat and
/// out depend only on that mean, so every node's `out` is the same in both; this one needs no
/// third GEMM and keeps out + e == M on each node, element by element, to one rounding.
///
/// Warm start: Q is drawn from `seed` at construction and is then the orthonormalized Q_mean of
/// the last step. Its column j starts as cols draws of (u1 + u2 + u3 + u4 - 2), u uniform in
/// [0, 1) from tasks::SplitMix64(tasks::derive_seed(seed, j)) (a bell-shaped, zero-mean,
/// sums-only draw: the same bits on every platform, unlike a libm Box-Muller); the columns are
/// then orthonormalized. A column of Q_mean in the span of the ones before it (after a zero or a
/// rank-deficient M) is redrawn from its initial draw, so the iteration never stays stuck at zero.
///
/// Memory: M (rows cols floats, the residual between steps), Q (cols r floats) and one block of
/// rows (kBlockFloats floats, or one row), allocated at construction; the steps allocate nothing.
/// Thread safety: none; one owner (the layer's task) calls the steps in order. Errors:
/// GRADMESH_CHECK (ContractError) for a span of the wrong size, a step out of order, nodes == 0, or
/// an empty matrix; ConfigError for rank 0; load_state throws CheckpointError for a state of
/// another shape. Values are not checked: a NaN in the gradient spreads through P, Q and out as it
/// would uncompressed.
class PowerSgd final : public engine::Checkpointable {
 public:
  /// `seed`: the job's seed for this matrix (the same on every node, e.g. derive_seed(job seed,
  /// layer)). `error_feedback`: keep the residual e.
  PowerSgd(std::size_t rows, std::size_t cols, std::size_t rank, std::uint64_t seed,
           bool error_feedback = true);

  [[nodiscard]] std::size_t rows() const noexcept { return rows_; }
  [[nodiscard]] std::size_t cols() const noexcept { return cols_; }
  /// The effective rank r: min(requested rank, rows, cols).
  [[nodiscard]] std::size_t rank() const noexcept { return rank_; }
  /// Floats of P (rows r): what the first all-reduce sums.
  [[nodiscard]] std::size_t p_floats() const noexcept { return rows_ * rank_; }
  /// Floats of Q (cols r): what the second all-reduce sums.
  [[nodiscard]] std::size_t q_floats() const noexcept { return cols_ * rank_; }
  [[nodiscard]] bool error_feedback() const noexcept { return error_feedback_; }

  /// Step 1: M = `gradient` (rows x cols) + residual, kept inside; writes P = M Q (rows x r) into
  /// `p`, Q the warm start. A block of rows at a time: each block of P is multiplied from M's
  /// block while it is in cache (one pass over M fewer).
  void compute_p(std::span<const float> gradient, std::span<float> p);
  /// Step 2, after the caller summed P over the nodes (the same bits on every node):
  /// orthonormalizes `p_sum`'s columns in place into P_hat (orthonormalize_columns), then writes
  /// this node's Q = M^T P_hat (cols x r) into `q`.
  void compute_q(std::span<float> p_sum, std::span<float> q);
  /// Step 3, after the caller summed Q over the `nodes` nodes: Q_mean = q_sum / nodes; the mean
  /// gradient's approximation P_hat Q_mean^T (rows x cols) is formed a block of whole rows at a
  /// time (about kBlockFloats floats, in a buffer of this object), and with error feedback each
  /// block's residual becomes M - out; then `apply(first_row, out_block)` (callable as
  /// void(std::size_t, std::span<const float>); out_block is the rows first_row .. first_row +
  /// out_block.size() / cols() - 1, row-major, valid during the call) consumes it: the caller
  /// steps those rows' weights there, while the block is in cache, instead of writing the whole
  /// approximation to memory and reading it again (two passes over rows x cols floats fewer). The
  /// blocks come in row order. `p_hat` is the buffer compute_q() orthonormalized; the
  /// orthonormalized Q_mean becomes the next warm start. An exception from `apply` leaves the
  /// step unfinished (load_state() ends it).
  template <class Apply>
  void decompress_each(std::span<const float> p_hat, std::span<const float> q_sum,
                       std::size_t nodes, Apply&& apply) {
    using Fn = std::remove_reference_t<Apply>;
    decompress_blocks(p_hat, q_sum, nodes, const_cast<void*>(static_cast<const void*>(&apply)),
                      [](void* fn, std::size_t row, std::span<const float> block) {
                        (*static_cast<Fn*>(fn))(row, block);
                      });
  }
  /// decompress_each() copying the blocks into `out` (rows x cols): the whole approximation.
  void decompress(std::span<const float> p_hat, std::span<const float> q_sum, std::size_t nodes,
                  std::span<float> out);

  /// Floats of one block of rows in compute_p() and decompress_each(): 32 Ki (128 KiB), so that a
  /// block of M, of the gradient or the output, and of the weights and the optimizer's state fit
  /// in a core's L2 together; at least one row.
  static constexpr std::size_t kBlockFloats = std::size_t{32} << 10;

  /// The error-feedback residual e (rows x cols; empty without error feedback), between
  /// decompress() and the next compute_p() (in between, the buffer holds M).
  [[nodiscard]] std::span<const float> residual() const noexcept;
  /// Squared norms of the last completed step, for the metrics (issue 28: the compression error):
  /// the gradient g, M = g + e, and M - out (the compression error, and with error feedback the
  /// new residual). Zero before the first step.
  struct Norms {
    double gradient2 = 0;  ///< ||g||^2
    double input2 = 0;     ///< ||M||^2
    double error2 = 0;     ///< ||M - out||^2 (with error feedback: the new residual's)
    /// ||M - P_hat P_hat^T M||^2 = ||M||^2 - ||Q||^2 (Q = M^T P_hat, P_hat's columns orthonormal or
    /// zero): what compressing this node's own M onto the shared subspace loses, without the
    /// difference between its M and the nodes' mean that error2 also holds. At least 0.
    double projection_error2 = 0;
  };
  [[nodiscard]] const Norms& last_norms() const noexcept { return norms_; }
  /// The warm-start Q (cols x r, orthonormal columns or zero ones).
  [[nodiscard]] std::span<const float> warm_start() const noexcept { return q_; }

  /// The shape (rows, cols, r as u64s), the residual and the warm-start Q, bit for bit; between
  /// steps only (ContractError inside one).
  void save_state(engine::StateWriter& out) override;
  /// Replaces the residual and the warm start and ends any step in progress (a rollback after a
  /// step cut short). Throws CheckpointError, naming the source and both shapes, for a state of
  /// another shape or error-feedback setting.
  void load_state(engine::StateReader& in) override;

 private:
  /// Where the current step is: the steps must come in order.
  enum class Phase : std::uint8_t { kIdle, kHaveP, kHaveQ };

  using BlockFn = void (*)(void*, std::size_t, std::span<const float>);
  /// decompress_each() without the template: fn(apply, first_row, out_block) per block.
  void decompress_blocks(std::span<const float> p_hat, std::span<const float> q_sum,
                         std::size_t nodes, void* apply, BlockFn fn);
  /// Draws column j of the initial Q into q_ (see the class comment).
  void draw_column(std::size_t j) noexcept;
  /// Orthonormalizes q_'s columns, redrawing a column that becomes zero (see the class comment).
  void orthonormalize_warm_start() noexcept;

  std::size_t rows_;
  std::size_t cols_;
  std::size_t rank_;
  std::uint64_t seed_;
  bool error_feedback_;
  Phase phase_ = Phase::kIdle;
  std::vector<float> m_;      // M during a step; with error feedback the residual between steps
  std::vector<float> q_;      // the warm-start Q, cols x r
  std::size_t block_rows_;    // rows in one block (kBlockFloats / cols, at least 1)
  std::vector<float> block_;  // one block of the approximation, block_rows_ x cols
  Norms norms_;               // of the last completed step
  double gradient2_ = 0;      // ||g||^2 of the step in progress
  double input2_ = 0;         // ||M||^2 of the step in progress
  double q2_ = 0;             // ||Q||^2 of the step in progress (this node's Q = M^T P_hat)
};

}  // namespace gradmesh::sync::compress
