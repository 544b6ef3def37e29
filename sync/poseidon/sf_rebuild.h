#pragma once
// Rebuilding a dense layer's gradient from sufficient factors (Poseidon ATC'17 sec. 2.1 and 3.2;
// Poseidon arXiv'15 sec. 4.3, SACP).

#include <cstddef>
#include <span>

#include "tasks/backend.h"

namespace gradmesh::sync {

/// dW = scale * U^T V with one GEMM, and db = scale * (column sums of U), where U (rows x M) and
/// V (rows x N) stack every node's sufficient factors in rank order (rows = n K). With U the
/// per-node mean-loss output gradients and scale = 1/n, this is the gradient of the mean loss over
/// the union of the n batches.
///
/// Runs on `backend` (Backend::sgemm, column_sums, scale, enqueued on its stream): u, v, dw and db
/// are that backend's memory — device memory on a device backend (the Model's device gradients
/// and SfbLayer's device stack), host memory on the CPU. Every backend sums db's rows in order; on
/// the CPU backend the result is bitwise the host form below.
///
/// Shapes: u.size() == rows*M, v.size() == rows*N, dw.size() == M*N (row-major, M outputs x N
/// inputs, as tasks::Dense lays W out), db.size() == M. Throws ContractError on a size mismatch,
/// DeviceError when a kernel fails. No allocation. Thread safety: the backend's (one thread).
void rebuild_dense_gradient(tasks::Backend& backend, std::span<const float> u,
                            std::span<const float> v, std::size_t rows, std::size_t m,
                            std::size_t n, float scale, std::span<float> dw, std::span<float> db);

/// The same on host memory (the CPU backend, tasks::cpu::host_backend()). Thread safety: none
/// needed (pure function of its arguments; OpenBLAS is reentrant).
void rebuild_dense_gradient(std::span<const float> u, std::span<const float> v, std::size_t rows,
                            std::size_t m, std::size_t n, float scale, std::span<float> dw,
                            std::span<float> db);

}  // namespace gradmesh::sync
