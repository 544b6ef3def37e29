#pragma once
// Conv2d on oneDNN's convolution primitives (compute.cpu_kernels = "onednn"; built only with
// GRADMESH_HAVE_ONEDNN). Internal to tasks/cpu/: CpuBackend::make_convolution makes it.

#include <cstddef>
#include <memory>

#include "tasks/backend.h"

namespace gradmesh::tasks::cpu {

/// oneDNN's direct convolution (forward, backward data, backward weights with the bias) for one
/// Conv2d: primitives for the layouts oneDNN prefers on this CPU (blocked: nChw16c and
/// OIhw16i16o on AVX-512, "jit:avx512_core"; nChw8c on AVX2, "jit:avx2"), with a reorder wherever
/// the layer's own memory is in another: its activations in the layouts set_layouts gave (NCHW
/// until then; the Model keeps cpu::preferred_blocked_layout() between the layers that take it, so
/// a chain needs none), its weights and their gradient F x C x k x k row-major (the sync stage's
/// contract). The blocked input is kept from forward to backward (weights' gradient), and its
/// buffer then takes the blocked input gradient. Primitives are built once per batch size (the
/// set-up's max_batch first) and reused; the execution arguments are bound once, their pointers set
/// per call: no allocation by gradmesh per iteration. Threads: an OpenMP team of compute.threads on
/// the calling thread (cpu::apply_onednn_threads). On a team of n >= 2 (and a batch of >= 2n) a
/// call runs as n batch slices side by side, one a thread, each on primitives made for one thread
/// (cpu::convolution_slices, on by default): the weights' gradient of each slice, added in slice
/// order. The thin convolutions of a small residual net scale badly over one primitive's threads
/// (the 16-channel 3x3 at 28x28's backward weights 1.28x from 1 to 2 threads); as slices, the
/// ResNet config trains 1.06-1.10x faster on 2 threads (docs/measured.md, 2026-12-07). The
/// primitives' scratchpads are the layer's own (user mode: a slice runs on an OpenMP worker, not
/// on the thread that made it).
///
/// Determinism: oneDNN's CPU primitives give the same bits from run to run for the same thread
/// count, CPU and buffer alignment (its documentation, "Reproducibility"); the backend's buffers
/// are 64-byte aligned; the slices and their sum are fixed by the thread count and the batch.
/// Another thread count may round the weights' gradient differently (its reduction over the batch
/// is split by thread or slice).
///
/// Throws DeviceError naming the primitive when oneDNN cannot make or run one.
[[nodiscard]] std::unique_ptr<ConvolutionKernels> make_onednn_convolution(Backend& backend,
                                                                          const Im2colGeometry& g,
                                                                          std::size_t filters,
                                                                          std::size_t max_batch);

}  // namespace gradmesh::tasks::cpu
