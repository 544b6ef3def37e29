#pragma once
// Rebuilding a dense layer's gradient from sufficient factors (Poseidon ATC'17 sec. 2.1 and 3.2;
// Poseidon arXiv'15 sec. 4.3, SACP).

#include <cstddef>
#include <span>

namespace gradmesh::sync {

/// dW = scale * U^T V with one GEMM, and db = scale * (column sums of U), where U (rows x M) and
/// V (rows x N) stack every node's sufficient factors in rank order (rows = n K). With U the
/// per-node mean-loss output gradients and scale = 1/n, this is the gradient of the mean loss over
/// the union of the n batches.
///
/// Shapes: u.size() == rows*M, v.size() == rows*N, dw.size() == M*N (row-major, M outputs x N
/// inputs, as tasks::Dense lays W out), db.size() == M. Throws ContractError on a size mismatch.
/// No allocation. Thread safety: none needed (pure function of its arguments).
void rebuild_dense_gradient(std::span<const float> u, std::span<const float> v, std::size_t rows,
                            std::size_t m, std::size_t n, float scale, std::span<float> dw,
                            std::span<float> db);

}  // namespace gradmesh::sync
