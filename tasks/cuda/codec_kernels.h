#pragma once
// Launchers of the gradient-codec kernels behind CudaBackend's codec operations
// (tasks/cuda/codec_kernels.cu; tasks/backend.h documents what each computes and
// sync/compress/device_codec.h composes them). Plain C++ types only, as kernels.h: every launcher
// enqueues on `stream`, returns at once and reports a launch failure as its cudaError_t. All
// pointers are device memory; sizes are in elements.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace gradmesh::tasks::cuda::kernels {

cudaError_t accumulate(float* sum, const float* x, std::size_t n, cudaStream_t stream);
/// Blocks of squares summed in double into `partials` (kSquarePartials doubles, scratch), then
/// those summed in order into *out: the same result for the same input on every run.
inline constexpr std::size_t kSquarePartials = 256;
cudaError_t sum_squares(const float* x, std::size_t n, double* partials, double* out,
                        cudaStream_t stream);
/// bf16: bfloat16, else IEEE binary16 (with codec.h's saturation at 65504).
cudaError_t encode_half(bool bf16, float* p, std::size_t n, std::uint16_t* out,
                        cudaStream_t stream);
cudaError_t decode_half(bool bf16, const std::uint16_t* in, std::size_t n, float* out, bool add,
                        cudaStream_t stream);
/// One block per chunk (chunk <= 4096 floats).
cudaError_t encode_int8(float* p, std::size_t n, std::size_t chunk, float* scales,
                        std::int8_t* values, cudaStream_t stream);
cudaError_t decode_int8(const float* scales, const std::int8_t* values, std::size_t n,
                        std::size_t chunk, float* out, bool add, cudaStream_t stream);
/// Scratch of top_k: four arrays of n u32 and CUB's radix-sort storage.
std::size_t top_k_scratch_bytes(std::size_t n);
/// CUB's stable radix sort of the magnitudes' bits (descending) with the indices, then of the
/// first k indices (ascending). `scratch`: top_k_scratch_bytes(n) bytes.
cudaError_t top_k(const float* p, std::size_t n, std::size_t k, std::uint32_t* indices,
                  std::byte* scratch, cudaStream_t stream);
cudaError_t random_k(std::uint64_t stream_seed, std::size_t n, std::size_t k,
                     std::uint32_t* indices, cudaStream_t stream);
cudaError_t gather_and_zero(float* p, const std::uint32_t* indices, std::size_t k, float* values,
                            cudaStream_t stream);
cudaError_t scatter_add(const std::uint32_t* indices, const float* values, std::size_t k,
                        float* out, cudaStream_t stream);

}  // namespace gradmesh::tasks::cuda::kernels
