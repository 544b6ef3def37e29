#pragma once
// BatchNorm on oneDNN's batch normalization primitives (compute.cpu_kernels = "onednn"; built
// only with GRADMESH_HAVE_ONEDNN). Internal to tasks/cpu/: CpuBackend::make_batch_norm makes it.

#include <cstddef>
#include <memory>

#include "tasks/backend.h"

namespace gradmesh::tasks::cpu {

/// oneDNN's batch normalization (training forward, inference forward on given statistics,
/// backward with the scale and shift gradients) for one BatchNorm of `channels` channels of
/// `spatial` positions, on the layer's own memory in the layout set_layout gave (NCHW, or
/// the blocked layout this CPU's kernels take, cpu::preferred_blocked_layout(): nChw16c and
/// "bnorm_jit:avx512_core" on AVX-512, nChw8c and "bnorm_jit:avx2" on AVX2; no reorder). With
/// set_relu(true) the primitives run with oneDNN's fuse_norm_relu: forward writes max(0, y) and
/// keeps one bit a value in a workspace, which backward applies to dy (one pass each way instead of
/// a ReLU layer's two). Primitives are built once per batch size and reused; arguments are bound
/// once and their pointers set per call (no allocation by gradmesh per iteration; the workspace,
/// and an input gradient's scratch when the caller wants none, are grown once). Threads: an OpenMP
/// team of compute.threads on the calling thread (cpu::apply_onednn_threads).
///
/// Determinism: for a given thread count, CPU and buffer alignment, the same bits from run to run
/// (oneDNN's "Reproducibility"; each thread's share of the batch's sums is fixed by the team's
/// size). Results differ from the builtin kernels' (another order of summation) by rounding.
///
/// Throws DeviceError naming the shape when oneDNN cannot make or run a primitive.
[[nodiscard]] std::unique_ptr<BatchNormKernels> make_onednn_batch_norm(
    Backend& backend, std::size_t channels, std::size_t spatial, std::size_t max_batch, float eps);

}  // namespace gradmesh::tasks::cpu
