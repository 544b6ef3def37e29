#pragma once
// Thin row-major wrappers over OpenBLAS (tasks/cpu/). Layers call BLAS only through here, so the
// cuBLAS kernels in tasks/cuda/ can mirror the same entry points.

#include <cstddef>

namespace gradmesh::tasks::cpu {

/// Sets how many threads OpenBLAS uses for one call (openblas_set_num_threads). n must be >= 1.
/// Thread safety: process-wide setting; a call running meanwhile keeps the count it started with.
/// CpuBackend::run_chunks sets 1 while chunks run (tasks/cpu/cpu_backend.h).
/// Throws gradmesh::ConfigError if n < 1.
void set_blas_threads(int n);

/// The threads OpenBLAS uses for one call now (openblas_get_num_threads). Thread-safe (a read).
[[nodiscard]] int blas_threads() noexcept;

/// Row-major single-precision GEMM: C = alpha * op(A) * op(B) + beta * C, where op(A) is m x k,
/// op(B) is k x n and C is m x n. lda/ldb/ldc are row strides in floats of A, B and C as stored
/// (so for trans_a, A is stored k x m and lda >= m). All sizes in elements. Thread safety: as
/// OpenBLAS (reentrant; distinct C buffers may be computed concurrently). No allocation by us.
/// Never throws; sizes of 0 are a no-op.
void sgemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
           const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
           std::size_t ldc) noexcept;

}  // namespace gradmesh::tasks::cpu
