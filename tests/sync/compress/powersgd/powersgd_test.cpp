// Tests for sync/compress/powersgd/powersgd.h: the orthonormalization, exactness at full rank for 1
// to 3 nodes simulated in one process, low-rank gradients, the warm start's convergence, the
// error-feedback invariant, the same bits on every node, zero and rank-deficient inputs, resume
// from a saved state bitwise, and the contract checks.

#include "sync/compress/powersgd/powersgd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "tasks/random.h"

using namespace gradmesh::sync::compress;
using gradmesh::CheckpointError;
using gradmesh::ConfigError;
using gradmesh::ContractError;

namespace {

using Floats = std::vector<float>;

/// n floats, uniform in [-1, 1).
Floats uniform(std::size_t n, std::uint64_t seed) {
  gradmesh::tasks::SplitMix64 rng(seed);
  Floats out(n);
  for (float& v : out) v = 2.0f * rng.next_float() - 1.0f;
  return out;
}

/// The rank-1 rows x cols matrix u v^T.
Floats outer(const Floats& u, const Floats& v) {
  Floats out(u.size() * v.size());
  for (std::size_t i = 0; i < u.size(); ++i) {
    for (std::size_t j = 0; j < v.size(); ++j) out[i * v.size() + j] = u[i] * v[j];
  }
  return out;
}

float max_abs(const Floats& values) {
  float m = 0;
  for (const float v : values) m = std::max(m, std::abs(v));
  return m;
}

float max_abs_difference(const Floats& a, const Floats& b) {
  REQUIRE(a.size() == b.size());
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

bool all_finite(const Floats& values) {
  return std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); });
}

bool same_bits(const Floats& a, const Floats& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

/// The element-wise sum of the nodes' buffers in node order: what a ring all-reduce hands every
/// node (the same bits on each).
Floats sum_over(const std::vector<Floats>& parts) {
  Floats sum(parts.front().size(), 0.0f);
  for (const Floats& part : parts) {
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  return sum;
}

/// One PowerSGD step on every node, with the two all-reduces done in process. Returns each
/// node's `out`.
std::vector<Floats> step(std::vector<PowerSgd>& nodes, const std::vector<Floats>& gradients) {
  const std::size_t n = nodes.size();
  std::vector<Floats> ps(n), qs(n), outs(n);
  for (std::size_t k = 0; k < n; ++k) {
    ps[k].resize(nodes[k].p_floats());
    nodes[k].compute_p(gradients[k], ps[k]);
  }
  std::vector<Floats> p_hats(n, sum_over(ps));  // each node its own copy of the sum
  for (std::size_t k = 0; k < n; ++k) {
    qs[k].resize(nodes[k].q_floats());
    nodes[k].compute_q(p_hats[k], qs[k]);
  }
  const Floats q_sum = sum_over(qs);
  for (std::size_t k = 0; k < n; ++k) {
    outs[k].resize(nodes[k].rows() * nodes[k].cols());
    nodes[k].decompress(p_hats[k], q_sum, n, outs[k]);
  }
  return outs;
}

std::vector<PowerSgd> make_nodes(std::size_t n, std::size_t rows, std::size_t cols,
                                 std::size_t rank, bool error_feedback = true,
                                 std::uint64_t seed = 42) {
  std::vector<PowerSgd> nodes;
  for (std::size_t k = 0; k < n; ++k) nodes.emplace_back(rows, cols, rank, seed, error_feedback);
  return nodes;
}

/// max |A^T A - D| for the row-major rows x cols `a`, D diagonal with 1 for a non-zero column and
/// 0 for a zero one: the non-zero columns orthonormal, the zero ones exactly zero.
double orthonormality_error(const Floats& a, std::size_t rows, std::size_t cols) {
  double worst = 0;
  for (std::size_t j = 0; j < cols; ++j) {
    bool zero = true;
    for (std::size_t i = 0; i < rows; ++i) zero = zero && a[i * cols + j] == 0.0f;
    for (std::size_t k = 0; k <= j; ++k) {
      double dot = 0;
      for (std::size_t i = 0; i < rows; ++i) {
        dot += static_cast<double>(a[i * cols + j]) * a[i * cols + k];
      }
      const double expected = (j == k && !zero) ? 1.0 : 0.0;
      worst = std::max(worst, std::abs(dot - expected));
    }
  }
  return worst;
}

}  // namespace

TEST_CASE("PowerSgd's effective rank and buffer sizes", "[compress][powersgd]") {
  const PowerSgd wide(6, 10, 4, 1);
  CHECK(wide.rank() == 4);
  CHECK(wide.p_floats() == 24);
  CHECK(wide.q_floats() == 40);
  CHECK(wide.residual().size() == 60);
  CHECK(PowerSgd(6, 10, 32, 1).rank() == 6);
  CHECK(PowerSgd(10, 3, 32, 1).rank() == 3);
  CHECK(PowerSgd(6, 10, 4, 1, false).residual().empty());
  CHECK_THROWS_AS(PowerSgd(6, 10, 0, 1), ConfigError);
  CHECK_THROWS_AS(PowerSgd(0, 10, 2, 1), ContractError);
}

TEST_CASE("orthonormalize_columns gives orthonormal columns and zeroes dependent ones",
          "[compress][powersgd]") {
  SECTION("independent columns") {
    Floats a = uniform(40 * 5, 7);
    CHECK(orthonormalize_columns(a, 40, 5) == 0);
    CHECK(orthonormality_error(a, 40, 5) < 1e-6);
  }
  SECTION("a repeated column, a scaled one and a zero one become zero, never NaN") {
    const std::size_t rows = 30, cols = 5;
    Floats a = uniform(rows * cols, 8);
    for (std::size_t i = 0; i < rows; ++i) {
      a[i * cols + 2] = a[i * cols + 0];          // repeated
      a[i * cols + 3] = -3.5f * a[i * cols + 1];  // scaled
      a[i * cols + 4] = 0.0f;                     // zero
    }
    CHECK(orthonormalize_columns(a, rows, cols) == 3);
    CHECK(all_finite(a));
    for (std::size_t i = 0; i < rows; ++i) {
      CHECK(a[i * cols + 2] == 0.0f);
      CHECK(a[i * cols + 3] == 0.0f);
      CHECK(a[i * cols + 4] == 0.0f);
    }
    CHECK(orthonormality_error(a, rows, cols) < 1e-6);
  }
  SECTION("more columns than rows: the columns past the rows' span become zero") {
    Floats a = uniform(4 * 7, 9);
    CHECK(orthonormalize_columns(a, 4, 7) == 3);
    CHECK(all_finite(a));
    CHECK(orthonormality_error(a, 4, 7) < 1e-6);
  }
  SECTION("tiny and huge scales are orthonormalized alike (the threshold is relative)") {
    for (const float scale : {1e-30f, 1e-10f, 1e10f, 1e30f}) {
      Floats a = uniform(20 * 3, 10);
      for (float& v : a) v *= scale;
      CHECK(orthonormalize_columns(a, 20, 3) == 0);
      CHECK(orthonormality_error(a, 20, 3) < 1e-6);
    }
  }
  SECTION("the same input bits give the same output bits") {
    Floats a = uniform(50 * 4, 11), b = a;
    orthonormalize_columns(a, 50, 4);
    orthonormalize_columns(b, 50, 4);
    CHECK(same_bits(a, b));
  }
}

TEST_CASE("PowerSgd at rank >= min(rows, cols) reproduces the mean gradient on 1 to 3 nodes",
          "[compress][powersgd]") {
  struct Shape {
    std::size_t rows, cols, rank;
  };
  // 40 x 1500: two blocks of rows (PowerSgd::kBlockFloats / 1500 = 21 rows, then 19).
  for (const Shape shape :
       {Shape{6, 10, 6}, Shape{10, 6, 8}, Shape{7, 7, 7}, Shape{3, 40, 5}, Shape{40, 1500, 40}}) {
    for (std::size_t n = 1; n <= 3; ++n) {
      CAPTURE(shape.rows, shape.cols, shape.rank, n);
      auto nodes = make_nodes(n, shape.rows, shape.cols, shape.rank);
      for (std::uint64_t iteration = 0; iteration < 3; ++iteration) {
        std::vector<Floats> gradients;
        for (std::size_t k = 0; k < n; ++k) {
          gradients.push_back(uniform(shape.rows * shape.cols, 100 * iteration + k));
        }
        Floats mean(shape.rows * shape.cols);
        for (std::size_t i = 0; i < mean.size(); ++i) {
          double sum = 0;
          for (const Floats& g : gradients) sum += g[i];
          mean[i] = static_cast<float>(sum / static_cast<double>(n));
        }
        const auto outs = step(nodes, gradients);
        for (const Floats& out : outs)
          CHECK(max_abs_difference(out, mean) <= 1e-5f * max_abs(mean));
      }
    }
  }
}

TEST_CASE("PowerSgd reproduces a gradient of rank <= r in one step", "[compress][powersgd]") {
  const std::size_t rows = 12, cols = 9;
  SECTION("rank 1 at rank 2, then again with error feedback for a few steps") {
    const Floats m = outer(uniform(rows, 1), uniform(cols, 2));
    auto nodes = make_nodes(1, rows, cols, 2);
    for (int iteration = 0; iteration < 4; ++iteration) {
      const Floats out = step(nodes, {m}).front();
      CHECK(all_finite(out));
      CHECK(max_abs_difference(out, m) <= 1e-5f * max_abs(m));
    }
  }
  SECTION("rank 2 at rank 3, on two nodes whose gradients are each rank 1") {
    const Floats a = outer(uniform(rows, 3), uniform(cols, 4));
    const Floats b = outer(uniform(rows, 5), uniform(cols, 6));
    Floats mean(a.size());
    for (std::size_t i = 0; i < mean.size(); ++i) mean[i] = (a[i] + b[i]) / 2.0f;
    auto nodes = make_nodes(2, rows, cols, 3);
    for (const Floats& out : step(nodes, {a, b})) {
      CHECK(max_abs_difference(out, mean) <= 1e-5f * max_abs(mean));
    }
  }
}

TEST_CASE("PowerSgd's warm start converges to the best rank-r approximation",
          "[compress][powersgd]") {
  // M = sum_k s_k u_k v_k^T with orthonormal u, v: the best rank-1 error is sqrt(sum_{k>1} s_k^2)
  // (Eckart-Young); one power iteration a step with a warm start shrinks the rest by (s_2/s_1)^2.
  const std::size_t rows = 16, cols = 12, spectrum = 4;
  Floats u = uniform(rows * spectrum, 20), v = uniform(cols * spectrum, 21);
  REQUIRE(orthonormalize_columns(u, rows, spectrum) == 0);
  REQUIRE(orthonormalize_columns(v, cols, spectrum) == 0);
  const double s[spectrum] = {10.0, 3.0, 1.0, 0.5};
  Floats m(rows * cols, 0.0f);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) {
      double sum = 0;
      for (std::size_t k = 0; k < spectrum; ++k)
        sum += s[k] * u[i * spectrum + k] * v[j * spectrum + k];
      m[i * cols + j] = static_cast<float>(sum);
    }
  }
  const double best = std::sqrt(3.0 * 3.0 + 1.0 + 0.25);
  const auto error = [&](const Floats& out) {
    double sum = 0;
    for (std::size_t i = 0; i < m.size(); ++i) sum += (double{m[i]} - out[i]) * (m[i] - out[i]);
    return std::sqrt(sum);
  };
  auto nodes = make_nodes(1, rows, cols, 1, /*error_feedback=*/false);
  const double first = error(step(nodes, {m}).front());
  CHECK(first >= best * (1 - 1e-6));
  double last = first;
  for (int iteration = 0; iteration < 15; ++iteration) last = error(step(nodes, {m}).front());
  CHECK(last == Approx(best).epsilon(1e-5));
  CHECK(last <= first);
}

TEST_CASE("PowerSgd with error feedback keeps out + residual == gradient + previous residual",
          "[compress][powersgd]") {
  // 50 x 1000: two blocks of rows (PowerSgd::kBlockFloats).
  for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{16, 12}, {50, 1000}}) {
    CAPTURE(rows, cols);
    auto nodes = make_nodes(1, rows, cols, 2);
    Floats total_gradient(rows * cols, 0.0f), total_out(rows * cols, 0.0f);
    for (std::uint64_t iteration = 0; iteration < 6; ++iteration) {
      const Floats g = uniform(rows * cols, 300 + iteration);
      const auto before = nodes.front().residual();
      Floats m(rows * cols);
      for (std::size_t i = 0; i < m.size(); ++i) m[i] = g[i] + before[i];
      const Floats out = step(nodes, {g}).front();
      const auto e = nodes.front().residual();
      const float tolerance = 1e-6f * max_abs(m);
      for (std::size_t i = 0; i < m.size(); ++i) {
        CHECK(std::abs(out[i] + e[i] - m[i]) <= tolerance);
        total_gradient[i] += g[i];
        total_out[i] += out[i];
      }
      // Rank 2 of a random matrix: a real compression, so the residual is not zero.
      CHECK(max_abs(Floats(e.begin(), e.end())) > 1e-2f);
      // The step's norms, for the metrics: of g, of M and of M - out (the new residual).
      double g2 = 0, m2 = 0, e2 = 0;
      for (std::size_t i = 0; i < m.size(); ++i) {
        g2 += static_cast<double>(g[i]) * g[i];
        m2 += static_cast<double>(m[i]) * m[i];
        e2 += static_cast<double>(e[i]) * e[i];
      }
      const PowerSgd::Norms& norms = nodes.front().last_norms();
      CHECK(norms.gradient2 == Approx(g2).epsilon(1e-6));
      CHECK(norms.input2 == Approx(m2).epsilon(1e-5));
      CHECK(norms.error2 == Approx(e2).epsilon(1e-5));
      CHECK(norms.error2 < norms.input2);
    }
    // Over the run, what was sent plus what is left is what was given.
    const auto e = nodes.front().residual();
    for (std::size_t i = 0; i < total_out.size(); ++i) total_out[i] += e[i];
    CHECK(max_abs_difference(total_out, total_gradient) <= 1e-5f * max_abs(total_gradient));
  }
}

TEST_CASE("PowerSgd's decompress_each hands over the approximation a block of rows at a time",
          "[compress][powersgd]") {
  struct Shape {
    std::size_t rows, cols, block_rows;
  };
  // Blocks of kBlockFloats / cols rows, the last one shorter; one row a block when a row is longer.
  const std::size_t wide = PowerSgd::kBlockFloats + 3;
  for (const Shape shape : {Shape{50, 1000, 32}, Shape{3, wide, 1}, Shape{5, 4, 5}}) {
    CAPTURE(shape.rows, shape.cols);
    // Two nodes with the same gradients: one decompresses whole, the other block by block.
    auto whole = make_nodes(1, shape.rows, shape.cols, 2);
    auto blocks = make_nodes(1, shape.rows, shape.cols, 2);
    for (std::uint64_t iteration = 0; iteration < 3; ++iteration) {
      const Floats g = uniform(shape.rows * shape.cols, 900 + iteration);
      const Floats out = step(whole, {g}).front();
      PowerSgd& node = blocks.front();
      Floats p(node.p_floats()), q(node.q_floats());
      node.compute_p(g, p);
      node.compute_q(p, q);
      Floats assembled(out.size(), -1.0f);
      std::size_t next_row = 0, calls = 0;
      node.decompress_each(p, q, 1, [&](std::size_t row, std::span<const float> block) {
        CHECK(row == next_row);  // in row order, every row once
        REQUIRE(block.size() % shape.cols == 0);
        const std::size_t block_rows = block.size() / shape.cols;
        CHECK(block_rows == std::min(shape.block_rows, shape.rows - row));
        std::copy(block.begin(), block.end(), assembled.begin() + row * shape.cols);
        next_row = row + block_rows;
        ++calls;
      });
      CHECK(next_row == shape.rows);
      CHECK(calls == (shape.rows + shape.block_rows - 1) / shape.block_rows);
      CHECK(same_bits(assembled, out));
      const auto e0 = whole.front().residual(), e1 = node.residual();
      CHECK(same_bits(Floats(e1.begin(), e1.end()), Floats(e0.begin(), e0.end())));
      CHECK(node.last_norms().error2 == whole.front().last_norms().error2);
    }
  }
}

TEST_CASE("PowerSgd gives every node the same bits of out and of the warm start",
          "[compress][powersgd]") {
  const std::size_t rows = 20, cols = 15, n = 3;
  auto nodes = make_nodes(n, rows, cols, 3);
  for (std::uint64_t iteration = 0; iteration < 4; ++iteration) {
    std::vector<Floats> gradients;
    for (std::size_t k = 0; k < n; ++k)
      gradients.push_back(uniform(rows * cols, 500 + 10 * iteration + k));
    const auto outs = step(nodes, gradients);
    for (std::size_t k = 1; k < n; ++k) {
      CHECK(same_bits(outs[k], outs[0]));
      const auto q0 = nodes[0].warm_start(), qk = nodes[k].warm_start();
      CHECK(same_bits(Floats(qk.begin(), qk.end()), Floats(q0.begin(), q0.end())));
      // The local residuals differ (different gradients); their approximation does not.
      CHECK_FALSE(same_bits(Floats(nodes[k].residual().begin(), nodes[k].residual().end()),
                            Floats(nodes[0].residual().begin(), nodes[0].residual().end())));
    }
  }
}

TEST_CASE("PowerSgd gives no NaN for a zero gradient or a rank-deficient P, and recovers",
          "[compress][powersgd]") {
  const std::size_t rows = 10, cols = 8;
  SECTION("a zero gradient gives zero, then a full-rank gradient is reproduced") {
    auto nodes = make_nodes(2, rows, cols, 8);
    const Floats zero(rows * cols, 0.0f);
    for (int iteration = 0; iteration < 2; ++iteration) {
      const auto outs = step(nodes, {zero, zero});
      for (const Floats& out : outs) CHECK(max_abs(out) == 0.0f);
      const auto q = nodes[0].warm_start();
      CHECK(all_finite(Floats(q.begin(), q.end())));
      CHECK(max_abs(Floats(q.begin(), q.end())) > 0.0f);  // redrawn, not stuck at zero
    }
    const Floats g = uniform(rows * cols, 600);
    for (const Floats& out : step(nodes, {g, g}))
      CHECK(max_abs_difference(out, g) <= 1e-5f * max_abs(g));
  }
  SECTION("opposite gradients on two nodes sum to zero") {
    auto nodes = make_nodes(2, rows, cols, 3);
    Floats g = uniform(rows * cols, 601), minus = g;
    for (float& v : minus) v = -v;
    for (const Floats& out : step(nodes, {g, minus})) CHECK(max_abs(out) == 0.0f);
    // Each node keeps its own gradient as the residual: nothing was sent.
    CHECK(max_abs_difference(Floats(nodes[0].residual().begin(), nodes[0].residual().end()), g) ==
          0.0f);
  }
  SECTION("a rank-1 gradient at rank 5 (P of rank 1)") {
    const Floats m = outer(uniform(rows, 602), uniform(cols, 603));
    auto nodes = make_nodes(1, rows, cols, 5);
    for (int iteration = 0; iteration < 3; ++iteration) {
      const Floats out = step(nodes, {m}).front();
      CHECK(all_finite(out));
      CHECK(max_abs_difference(out, m) <= 1e-5f * max_abs(m));
      const auto q = nodes[0].warm_start();
      CHECK(all_finite(Floats(q.begin(), q.end())));
    }
  }
}

TEST_CASE("PowerSgd resumes bit for bit from a saved state", "[compress][powersgd]") {
  const std::size_t rows = 14, cols = 11;
  auto gradient = [&](std::uint64_t iteration) { return uniform(rows * cols, 700 + iteration); };
  for (const bool error_feedback : {true, false}) {
    CAPTURE(error_feedback);
    auto uninterrupted = make_nodes(1, rows, cols, 3, error_feedback);
    for (std::uint64_t t = 0; t < 3; ++t) step(uninterrupted, {gradient(t)});
    gradmesh::engine::StateWriter writer;
    uninterrupted.front().save_state(writer);
    // Another seed: everything that matters after a step is in the state.
    auto resumed = make_nodes(1, rows, cols, 3, error_feedback, /*seed=*/99);
    gradmesh::engine::StateReader reader(writer.bytes(), "test state");
    resumed.front().load_state(reader);
    reader.expect_end();
    for (std::uint64_t t = 3; t < 6; ++t) {
      const Floats a = step(uninterrupted, {gradient(t)}).front();
      const Floats b = step(resumed, {gradient(t)}).front();
      CHECK(same_bits(a, b));
    }
  }
  SECTION("a state of another shape, rank or error-feedback setting is refused") {
    auto source = make_nodes(1, rows, cols, 3);
    gradmesh::engine::StateWriter writer;
    source.front().save_state(writer);
    const auto refuses = [&](PowerSgd target) {
      gradmesh::engine::StateReader reader(writer.bytes(), "test state");
      CHECK_THROWS_AS(target.load_state(reader), CheckpointError);
    };
    refuses(PowerSgd(cols, rows, 3, 42));
    refuses(PowerSgd(rows, cols, 2, 42));
    refuses(PowerSgd(rows + 1, cols, 3, 42));
    refuses(PowerSgd(rows, cols, 3, 42, false));
  }
}

TEST_CASE("PowerSgd refuses spans of the wrong size and steps out of order",
          "[compress][powersgd]") {
  const std::size_t rows = 6, cols = 5;
  PowerSgd psgd(rows, cols, 2, 1);
  Floats g(rows * cols, 1.0f), p(psgd.p_floats()), q(psgd.q_floats()), out(rows * cols);
  Floats small(3);
  CHECK_THROWS_AS(psgd.compute_q(p, q), ContractError);  // before compute_p
  CHECK_THROWS_AS(psgd.decompress(p, q, 1, out), ContractError);
  CHECK_THROWS_AS(psgd.compute_p(small, p), ContractError);
  CHECK_THROWS_AS(psgd.compute_p(g, small), ContractError);
  psgd.compute_p(g, p);
  CHECK_THROWS_AS(psgd.compute_p(g, p), ContractError);  // the step is unfinished
  gradmesh::engine::StateWriter writer;
  CHECK_THROWS_AS(psgd.save_state(writer), ContractError);
  CHECK_THROWS_AS(psgd.compute_q(small, q), ContractError);
  CHECK_THROWS_AS(psgd.compute_q(p, small), ContractError);
  psgd.compute_q(p, q);
  CHECK_THROWS_AS(psgd.decompress(small, q, 1, out), ContractError);
  CHECK_THROWS_AS(psgd.decompress(p, small, 1, out), ContractError);
  CHECK_THROWS_AS(psgd.decompress(p, q, 1, small), ContractError);
  CHECK_THROWS_AS(psgd.decompress(p, q, 0, out), ContractError);
  psgd.decompress(p, q, 1, out);
  CHECK(all_finite(out));
  CHECK_THROWS_AS(orthonormalize_columns(g, rows + 1, cols), ContractError);
}
