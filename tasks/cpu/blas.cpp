#include "tasks/cpu/blas.h"

#include <cblas.h>

#include <string>

#include "engine/error.h"

namespace gradmesh::tasks::cpu {

void set_blas_threads(int n) {
  if (n < 1) {
    throw ConfigError("BLAS threads: expected >= 1, got " + std::to_string(n));
  }
  openblas_set_num_threads(n);
}

int blas_threads() noexcept { return openblas_get_num_threads(); }

void sgemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
           const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
           std::size_t ldc) noexcept {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

}  // namespace gradmesh::tasks::cpu
