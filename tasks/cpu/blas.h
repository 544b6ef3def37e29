#pragma once
// Thin row-major wrappers over the CPU backend's GEMM: oneDNN's sgemm (dnnl_sgemm) or OpenBLAS's
// (tasks/cpu/). Layers call BLAS only through here, so the cuBLAS kernels in tasks/cuda/ can mirror
// the same entry points.

#include <cstddef>
#include <string>

namespace gradmesh::tasks::cpu {

/// Which library computes sgemm (process-wide; cpu::set_kernels chooses it from
/// compute.cpu_kernels).
enum class BlasLibrary {
  kOpenBlas,  ///< OpenBLAS's cblas_sgemm, threads set with openblas_set_num_threads
  kOnednn,    ///< oneDNN's dnnl_sgemm (its JIT kernels for the CPU's ISA), OpenMP threads
};

/// Whether this binary was built with oneDNN (libdnnl-dev found by CMake).
[[nodiscard]] bool onednn_built() noexcept;

/// Chooses the library of sgemm for every later call. Default: kOnednn where onednn_built(),
/// else kOpenBlas. Thread safety: process-wide setting (a call under way finishes with the library
/// it started with). Throws gradmesh::ConfigError for kOnednn in a build without oneDNN.
void set_blas_library(BlasLibrary library);
[[nodiscard]] BlasLibrary blas_library() noexcept;

/// Sets how many threads one sgemm call uses, for both libraries (OpenBLAS:
/// openblas_set_num_threads; oneDNN: the OpenMP team of the calling thread, applied at its next
/// call). n must be >= 1. Thread safety: process-wide setting; a call running meanwhile keeps the
/// count it started with. CpuBackend::run_chunks sets 1 while chunks run
/// (tasks/cpu/cpu_backend.h). Throws gradmesh::ConfigError if n < 1.
void set_blas_threads(int n);

/// The threads one sgemm call uses now (set_blas_threads' n). Thread-safe (a read).
[[nodiscard]] int blas_threads() noexcept;

/// Applies blas_threads() to the calling thread's OpenMP team, which oneDNN's primitives and
/// sgemm run on: a no-op when it already has that size, or in a build without oneDNN. Call it
/// before any oneDNN work on a thread (cpu::sgemm does).
void apply_onednn_threads() noexcept;
/// The same for a team of n threads (a oneDNN step too small to share: n = 1).
void apply_onednn_team(int n) noexcept;

/// A line naming the GEMM library and its kernels: "oneDNN 2.6.3 (sgemm: avx512_core_bf16)",
/// "OpenBLAS 0.3.21 (SkylakeX kernels)".
[[nodiscard]] std::string blas_description();

/// A warning when OpenBLAS picked kernels older than the CPU (it reads the CPU's model, and falls
/// back to its generic SSE3 "Prescott" kernels on a model it does not know, 3-6x slower on an
/// AVX-512 or AVX2 machine: seen here on a Xeon of family 6 model 207 with OpenBLAS 0.3.21), with
/// the fix; "" when OpenBLAS's kernels fit the CPU. Thread-safe.
[[nodiscard]] std::string openblas_core_warning();

/// Row-major single-precision GEMM: C = alpha * op(A) * op(B) + beta * C, where op(A) is m x k,
/// op(B) is k x n and C is m x n. lda/ldb/ldc are row strides in floats of A, B and C as stored
/// (so for trans_a, A is stored k x m and lda >= m). All sizes in elements. Thread safety: both
/// libraries are reentrant (distinct C buffers may be computed concurrently). No allocation by us.
/// Never throws; sizes of 0 are a no-op. Determinism: the same bits from run to run for the same
/// thread count; oneDNN may split k across threads, so another count may round differently.
void sgemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
           const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
           std::size_t ldc) noexcept;

}  // namespace gradmesh::tasks::cpu
