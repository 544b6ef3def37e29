#include "sync/poseidon/sf_rebuild.h"

#include "engine/error.h"
#include "tasks/cpu/cpu_backend.h"

namespace gradmesh::sync {

void rebuild_dense_gradient(tasks::Backend& backend, std::span<const float> u,
                            std::span<const float> v, std::size_t rows, std::size_t m,
                            std::size_t n, float scale, std::span<float> dw, std::span<float> db) {
  GRADMESH_CHECK_EQ(u.size(), rows * m, "U must be rows x M");
  GRADMESH_CHECK_EQ(v.size(), rows * n, "V must be rows x N");
  GRADMESH_CHECK_EQ(dw.size(), m * n, "dW must be M x N");
  GRADMESH_CHECK_EQ(db.size(), m, "db must have M floats");
  // dW (M x N) = scale * U^T (M x rows) * V (rows x N)
  backend.sgemm(true, false, m, n, rows, scale, u.data(), m, v.data(), n, 0.0f, dw.data(), n);
  backend.column_sums(u.data(), rows, m, db.data());
  backend.scale(db.data(), m, scale);
}

void rebuild_dense_gradient(std::span<const float> u, std::span<const float> v, std::size_t rows,
                            std::size_t m, std::size_t n, float scale, std::span<float> dw,
                            std::span<float> db) {
  rebuild_dense_gradient(tasks::cpu::host_backend(), u, v, rows, m, n, scale, dw, db);
}

}  // namespace gradmesh::sync
