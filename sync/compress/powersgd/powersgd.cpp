#include "sync/compress/powersgd/powersgd.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "engine/error.h"
#include "tasks/cpu/blas.h"
#include "tasks/random.h"

namespace gradmesh::sync::compress {

namespace {

/// One pass of projections of column j of the row-major rows x cols `a` against its columns
/// 0 .. j-1, each with the column as it is after the ones before (modified Gram-Schmidt).
void project_out(float* a, std::size_t rows, std::size_t cols, std::size_t j) noexcept {
  for (std::size_t k = 0; k < j; ++k) {
    double dot = 0;
    for (std::size_t i = 0; i < rows; ++i) {
      dot += static_cast<double>(a[i * cols + k]) * static_cast<double>(a[i * cols + j]);
    }
    if (dot == 0) continue;
    for (std::size_t i = 0; i < rows; ++i) {
      float& v = a[i * cols + j];
      v = static_cast<float>(static_cast<double>(v) - dot * static_cast<double>(a[i * cols + k]));
    }
  }
}

double column_norm(const float* a, std::size_t rows, std::size_t cols, std::size_t j) noexcept {
  double sum = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    const auto v = static_cast<double>(a[i * cols + j]);
    sum += v * v;
  }
  return std::sqrt(sum);
}

/// Makes column j orthogonal to columns 0 .. j-1 (assumed orthonormal or zero) and of norm 1, or
/// zero when it is in their span (kOrthogonalizeEpsilon). Returns whether it is non-zero.
bool orthonormalize_column(float* a, std::size_t rows, std::size_t cols, std::size_t j) noexcept {
  const double before = column_norm(a, rows, cols, j);
  project_out(a, rows, cols, j);
  project_out(a, rows, cols, j);  // twice is enough: orthogonal to float precision
  const double after = column_norm(a, rows, cols, j);
  // `!(after > ...)` rather than `after <= ...`: a zero column (0 <= 0) is zero either way.
  if (!(after > kOrthogonalizeEpsilon * before)) {
    for (std::size_t i = 0; i < rows; ++i) a[i * cols + j] = 0.0f;
    return false;
  }
  const double inverse = 1.0 / after;
  for (std::size_t i = 0; i < rows; ++i) {
    float& v = a[i * cols + j];
    v = static_cast<float>(static_cast<double>(v) * inverse);
  }
  return true;
}

/// Sums of squares in double over 8 lanes (element i in lane i % 8), added lane by lane at the
/// end: a fixed order (the same bits on every node) without one long chain of dependent adds,
/// which would bound a pass over M by the adder's latency rather than by memory.
class SquareSums {
 public:
  void add(const float* x, std::size_t n) noexcept {
    std::size_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (std::size_t j = 0; j < kLanes; ++j) {
        lanes_[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
      }
    }
    for (std::size_t j = 0; i < n; ++i, ++j) {
      lanes_[j] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    }
  }
  [[nodiscard]] double total() const noexcept {
    double sum = 0;
    for (const double lane : lanes_) sum += lane;
    return sum;
  }

 private:
  static constexpr std::size_t kLanes = 8;
  std::array<double, kLanes> lanes_{};
};

}  // namespace

std::size_t orthonormalize_columns(std::span<float> matrix, std::size_t rows, std::size_t cols) {
  GRADMESH_CHECK_EQ(matrix.size(), rows * cols, "orthonormalize_columns: matrix size");
  std::size_t zeroed = 0;
  for (std::size_t j = 0; j < cols; ++j) {
    if (!orthonormalize_column(matrix.data(), rows, cols, j)) ++zeroed;
  }
  return zeroed;
}

PowerSgd::PowerSgd(std::size_t rows, std::size_t cols, std::size_t rank, std::uint64_t seed,
                   bool error_feedback)
    : rows_(rows), cols_(cols), rank_(0), seed_(seed), error_feedback_(error_feedback) {
  if (rank == 0) {
    throw ConfigError("PowerSGD rank = 0: the approximation rank must be at least 1");
  }
  GRADMESH_CHECK(rows > 0 && cols > 0, "PowerSgd: the gradient matrix must not be empty (" +
                                           std::to_string(rows) + " x " + std::to_string(cols) +
                                           ")");
  rank_ = std::min({rank, rows, cols});
  m_.assign(rows_ * cols_, 0.0f);
  q_.assign(cols_ * rank_, 0.0f);
  block_rows_ = std::clamp<std::size_t>(kBlockFloats / cols_, 1, rows_);
  block_.assign(block_rows_ * cols_, 0.0f);
  for (std::size_t j = 0; j < rank_; ++j) draw_column(j);
  orthonormalize_warm_start();
}

std::span<const float> PowerSgd::residual() const noexcept {
  if (!error_feedback_) return {};
  return m_;
}

void PowerSgd::draw_column(std::size_t j) noexcept {
  tasks::SplitMix64 rng(tasks::derive_seed(seed_, j));
  for (std::size_t i = 0; i < cols_; ++i) {
    q_[i * rank_ + j] =
        rng.next_float() + rng.next_float() + rng.next_float() + rng.next_float() - 2.0f;
  }
}

void PowerSgd::orthonormalize_warm_start() noexcept {
  for (std::size_t j = 0; j < rank_; ++j) {
    if (orthonormalize_column(q_.data(), cols_, rank_, j)) continue;
    // In the span of the columns before it (Q_mean of a zero or rank-deficient M): start this
    // direction afresh, or P = M Q would keep it zero for every later gradient.
    draw_column(j);
    orthonormalize_column(q_.data(), cols_, rank_, j);
  }
}

void PowerSgd::compute_p(std::span<const float> gradient, std::span<float> p) {
  GRADMESH_CHECK(phase_ == Phase::kIdle, "PowerSgd::compute_p: the previous step is unfinished");
  GRADMESH_CHECK_EQ(gradient.size(), m_.size(), "PowerSgd::compute_p: gradient size");
  GRADMESH_CHECK_EQ(p.size(), p_floats(), "PowerSgd::compute_p: P size");
  SquareSums gradient2, input2;
  for (std::size_t row = 0; row < rows_; row += block_rows_) {
    const std::size_t block_rows = std::min(block_rows_, rows_ - row);
    const std::size_t count = block_rows * cols_;
    float* m = m_.data() + row * cols_;
    const float* g = gradient.data() + row * cols_;
    gradient2.add(g, count);
    if (error_feedback_) {
      for (std::size_t i = 0; i < count; ++i) m[i] += g[i];  // M = g + e
    } else {
      std::copy_n(g, count, m);
    }
    input2.add(m, count);
    // P's rows of the block = M's block Q: (block_rows x cols) (cols x r), M's block in cache.
    tasks::cpu::sgemm(false, false, block_rows, rank_, cols_, 1.0f, m, cols_, q_.data(), rank_,
                      0.0f, p.data() + row * rank_, rank_);
  }
  gradient2_ = gradient2.total();
  input2_ = input2.total();
  phase_ = Phase::kHaveP;
}

void PowerSgd::compute_q(std::span<float> p_sum, std::span<float> q) {
  GRADMESH_CHECK(phase_ == Phase::kHaveP, "PowerSgd::compute_q: compute_p() must come first");
  GRADMESH_CHECK_EQ(p_sum.size(), p_floats(), "PowerSgd::compute_q: summed P size");
  GRADMESH_CHECK_EQ(q.size(), q_floats(), "PowerSgd::compute_q: Q size");
  orthonormalize_columns(p_sum, rows_, rank_);
  // Q = M^T P_hat: (cols x rows) (rows x r); M is stored rows x cols.
  tasks::cpu::sgemm(true, false, cols_, rank_, rows_, 1.0f, m_.data(), cols_, p_sum.data(), rank_,
                    0.0f, q.data(), rank_);
  SquareSums q2;
  q2.add(q.data(), q.size());
  q2_ = q2.total();
  phase_ = Phase::kHaveQ;
}

void PowerSgd::decompress(std::span<const float> p_hat, std::span<const float> q_sum,
                          std::size_t nodes, std::span<float> out) {
  GRADMESH_CHECK_EQ(out.size(), m_.size(), "PowerSgd::decompress: output size");
  decompress_each(p_hat, q_sum, nodes, [&](std::size_t row, std::span<const float> block) {
    std::copy(block.begin(), block.end(), out.begin() + static_cast<std::ptrdiff_t>(row * cols_));
  });
}

void PowerSgd::decompress_blocks(std::span<const float> p_hat, std::span<const float> q_sum,
                                 std::size_t nodes, void* apply, BlockFn fn) {
  GRADMESH_CHECK(phase_ == Phase::kHaveQ, "PowerSgd::decompress: compute_q() must come first");
  GRADMESH_CHECK_EQ(p_hat.size(), p_floats(), "PowerSgd::decompress: P_hat size");
  GRADMESH_CHECK_EQ(q_sum.size(), q_floats(), "PowerSgd::decompress: summed Q size");
  GRADMESH_CHECK_GT(nodes, std::size_t{0}, "PowerSgd::decompress: node count");
  const auto n = static_cast<float>(nodes);
  for (std::size_t i = 0; i < q_.size(); ++i) q_[i] = q_sum[i] / n;  // Q_mean
  SquareSums error2;
  for (std::size_t row = 0; row < rows_; row += block_rows_) {
    const std::size_t block_rows = std::min(block_rows_, rows_ - row);
    const std::size_t count = block_rows * cols_;
    float* out = block_.data();
    // The block's rows of out = P_hat Q_mean^T: (block_rows x r) (r x cols).
    tasks::cpu::sgemm(false, true, block_rows, cols_, rank_, 1.0f, p_hat.data() + row * rank_,
                      rank_, q_.data(), rank_, 0.0f, out, cols_);
    float* m = m_.data() + row * cols_;
    // e = M - out: the new residual with error feedback (without it, compute_p overwrites it).
    for (std::size_t i = 0; i < count; ++i) m[i] -= out[i];
    error2.add(m, count);
    fn(apply, row, std::span<const float>(out, count));
  }
  norms_ = Norms{gradient2_, input2_, error2.total(), std::max(0.0, input2_ - q2_)};
  orthonormalize_warm_start();
  phase_ = Phase::kIdle;
}

void PowerSgd::save_state(engine::StateWriter& out) {
  GRADMESH_CHECK(phase_ == Phase::kIdle, "PowerSgd::save_state: inside a step");
  out.write_u64(rows_);
  out.write_u64(cols_);
  out.write_u64(rank_);
  out.write_floats(residual());
  out.write_floats(q_);
}

void PowerSgd::load_state(engine::StateReader& in) {
  const std::uint64_t rows = in.read_u64();
  const std::uint64_t cols = in.read_u64();
  const std::uint64_t rank = in.read_u64();
  if (rows != rows_ || cols != cols_ || rank != rank_) {
    throw CheckpointError(in.source() + ": PowerSGD state of a " + std::to_string(rows) + " x " +
                          std::to_string(cols) + " matrix at rank " + std::to_string(rank) +
                          ", expected " + std::to_string(rows_) + " x " + std::to_string(cols_) +
                          " at rank " + std::to_string(rank_));
  }
  if (error_feedback_) {
    in.read_floats(m_);
  } else {
    in.read_floats({});
  }
  in.read_floats(q_);
  phase_ = Phase::kIdle;
}

}  // namespace gradmesh::sync::compress
