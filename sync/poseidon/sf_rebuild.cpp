#include "sync/poseidon/sf_rebuild.h"

#include <algorithm>

#include "engine/error.h"
#include "tasks/cpu/blas.h"

namespace gradmesh::sync {

void rebuild_dense_gradient(std::span<const float> u, std::span<const float> v, std::size_t rows,
                            std::size_t m, std::size_t n, float scale, std::span<float> dw,
                            std::span<float> db) {
  GRADMESH_CHECK_EQ(u.size(), rows * m, "U must be rows x M");
  GRADMESH_CHECK_EQ(v.size(), rows * n, "V must be rows x N");
  GRADMESH_CHECK_EQ(dw.size(), m * n, "dW must be M x N");
  GRADMESH_CHECK_EQ(db.size(), m, "db must have M floats");
  // dW (M x N) = scale * U^T (M x rows) * V (rows x N)
  tasks::cpu::sgemm(true, false, m, n, rows, scale, u.data(), m, v.data(), n, 0.0f, dw.data(), n);
  std::fill(db.begin(), db.end(), 0.0f);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = u.data() + r * m;
    for (std::size_t j = 0; j < m; ++j) db[j] += row[j];
  }
  for (float& x : db) x *= scale;
}

}  // namespace gradmesh::sync
