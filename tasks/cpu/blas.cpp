#include "tasks/cpu/blas.h"

#include <cblas.h>

#include <atomic>
#include <string>
#include <string_view>

#include "engine/error.h"

#if GRADMESH_HAVE_ONEDNN
#include <omp.h>

#include <oneapi/dnnl/dnnl.h>
#endif

namespace gradmesh::tasks::cpu {
namespace {

std::atomic<BlasLibrary> library{GRADMESH_HAVE_ONEDNN ? BlasLibrary::kOnednn
                                                      : BlasLibrary::kOpenBlas};
std::atomic<int> gemm_threads{1};

}  // namespace

bool onednn_built() noexcept { return GRADMESH_HAVE_ONEDNN != 0; }

void set_blas_library(BlasLibrary l) {
  if (l == BlasLibrary::kOnednn && !onednn_built()) {
    throw ConfigError(
        "compute.cpu_kernels = \"onednn\": this binary was built without oneDNN (CMake found no "
        "libdnnl-dev, or GRADMESH_WITH_ONEDNN was OFF); install libdnnl-dev and rebuild, or use "
        "\"builtin\"");
  }
  library.store(l, std::memory_order_relaxed);
}

BlasLibrary blas_library() noexcept { return library.load(std::memory_order_relaxed); }

void set_blas_threads(int n) {
  if (n < 1) {
    throw ConfigError("BLAS threads: expected >= 1, got " + std::to_string(n));
  }
  gemm_threads.store(n, std::memory_order_relaxed);
  openblas_set_num_threads(n);
}

int blas_threads() noexcept { return gemm_threads.load(std::memory_order_relaxed); }

void apply_onednn_team(int n) noexcept {
#if GRADMESH_HAVE_ONEDNN
  // The calling thread's nthreads-var: each thread that calls oneDNN (the node's compute task, a
  // chunk's worker) leads its own OpenMP team of this size.
  thread_local int applied = 0;
  if (applied != n) {
    omp_set_num_threads(n);
    applied = n;
  }
#else
  (void)n;
#endif
}

void apply_onednn_threads() noexcept { apply_onednn_team(blas_threads()); }

std::string blas_description() {
#if GRADMESH_HAVE_ONEDNN
  if (blas_library() == BlasLibrary::kOnednn) {
    const dnnl_version_t* v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
           std::to_string(v->patch);
  }
#endif
  return std::string("OpenBLAS (") + openblas_get_corename() + " kernels)";
}

std::string openblas_core_warning() {
  const std::string_view core = openblas_get_corename();
  // OpenBLAS's fallbacks for a CPU it does not know, and its pre-AVX x86 cores.
  const bool generic = core == "Prescott" || core == "Core2" || core == "Penryn" ||
                       core == "Dunnington" || core == "Nehalem" || core == "Atom" ||
                       core == "Katmai" || core == "Coppermine" || core == "Northwood";
  if (!generic) return "";
  const char* better = __builtin_cpu_supports("avx512f") ? "SkylakeX"
                       : __builtin_cpu_supports("avx2")  ? "Haswell"
                                                         : nullptr;
  if (better == nullptr) return "";
  return std::string("OpenBLAS chose its ") + std::string(core) + " kernels on a CPU with " +
         (std::string_view(better) == "SkylakeX" ? "AVX-512" : "AVX2") +
         " (it does not know this CPU model): its sgemm runs 3-6x slower than it can; set "
         "OPENBLAS_CORETYPE=" +
         better + " in the environment, or use compute.cpu_kernels = \"onednn\"";
}

void sgemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
           const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
           std::size_t ldc) noexcept {
  if (m == 0 || n == 0) return;
#if GRADMESH_HAVE_ONEDNN
  if (blas_library() == BlasLibrary::kOnednn) {
    apply_onednn_threads();
    // Row-major, as ours. It returns an error only for bad arguments (the caller's contract).
    (void)dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', static_cast<dnnl_dim_t>(m),
                     static_cast<dnnl_dim_t>(n), static_cast<dnnl_dim_t>(k), alpha, a,
                     static_cast<dnnl_dim_t>(lda), b, static_cast<dnnl_dim_t>(ldb), beta, c,
                     static_cast<dnnl_dim_t>(ldc));
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

}  // namespace gradmesh::tasks::cpu
