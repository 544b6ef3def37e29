#pragma once
// Launchers of the CUDA kernels behind CudaBackend (tasks/cuda/kernels.cu). Plain C++ types only,
// so that kernels.cu needs nothing of the rest of gradmesh; CudaBackend documents what each
// computes (they mirror tasks/backend.h). Every launcher enqueues on `stream` and returns at
// once; it reports a launch failure by returning the cudaError_t (cudaSuccess otherwise). All
// pointers are device memory; sizes are in elements.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace gradmesh::tasks::cuda::kernels {

cudaError_t broadcast_rows(const float* row, std::size_t rows, std::size_t cols, float* y,
                           cudaStream_t stream);
cudaError_t column_sums(const float* a, std::size_t rows, std::size_t cols, float* sums,
                        cudaStream_t stream);
cudaError_t multiply(const float* a, const float* b, std::size_t n, float* y, cudaStream_t stream);
cudaError_t dropout_forward(const float* x, std::size_t n, std::uint64_t seed, float p, float scale,
                            float* mask, float* y, cudaStream_t stream);
cudaError_t relu_forward(const float* x, std::size_t n, float* y, cudaStream_t stream);
cudaError_t relu_backward(const float* y, const float* dy, std::size_t n, float* dx,
                          cudaStream_t stream);
cudaError_t fill(float* dst, std::size_t n, float value, cudaStream_t stream);
cudaError_t scale(float* x, std::size_t n, float alpha, cudaStream_t stream);
/// Sgd::step on n floats (w, velocity written), rounded operation by operation as the host's.
cudaError_t sgd_step(float* w, const float* g, float* velocity, std::size_t n, float lr,
                     float momentum, float weight_decay, cudaStream_t stream);

/// adam_update (tasks/optim/adam.h) on n floats, rounded operation by operation as the host's:
/// c1, c2 the step's bias corrections; decoupled: AdamW.
cudaError_t adam_step(float* w, const float* g, float* m, float* v, std::size_t n, float lr,
                      float weight_decay, float beta1, float beta2, float eps, bool decoupled,
                      float c1, float c2, cudaStream_t stream);

/// Input C x H x W, k x k kernel, stride s, padding p, output OH x OW.
struct ConvShape {
  std::size_t channels, height, width, kernel, stride, padding, out_height, out_width;
};
cudaError_t im2col(const float* x, std::size_t samples, const ConvShape& g, float* col,
                   std::size_t ld, cudaStream_t stream);
cudaError_t col2im(const float* dcol, std::size_t ld, std::size_t samples, const ConvShape& g,
                   float* dx, cudaStream_t stream);
cudaError_t unpack_channels_add_bias(const float* out, std::size_t ld, std::size_t samples,
                                     std::size_t filters, std::size_t positions, const float* bias,
                                     float* y, cudaStream_t stream);
cudaError_t pack_channels(const float* dy, std::size_t samples, std::size_t filters,
                          std::size_t positions, float* out, std::size_t ld, float* bias_sums,
                          cudaStream_t stream);

/// Planes of H x W, window x window, stride s, output OH x OW.
struct PoolShape {
  std::size_t height, width, window, stride, out_height, out_width;
};
cudaError_t max_pool_forward(const float* x, std::size_t planes, const PoolShape& g, float* y,
                             std::uint32_t* argmax, cudaStream_t stream);
cudaError_t max_pool_backward(const float* dy, const std::uint32_t* argmax, std::size_t planes,
                              const PoolShape& g, float* dx, cudaStream_t stream);
/// One thread per output: the window's mean, summed in the CPU's order.
cudaError_t avg_pool_forward(const float* x, std::size_t planes, const PoolShape& g, float* y,
                             cudaStream_t stream);
/// One thread per input pixel: dy / window^2 of every output whose window covers it, ascending.
cudaError_t avg_pool_backward(const float* dy, std::size_t planes, const PoolShape& g, float* dx,
                              cudaStream_t stream);

/// Batch normalization (Backend's batch_norm_*): one block per channel for the statistics and the
/// parameter gradients (each sample's block reduction, then the samples in order, as the CPU),
/// one thread per float for the rest.
cudaError_t batch_norm_statistics(const float* x, std::size_t samples, std::size_t channels,
                                  std::size_t spatial, float* mean, float* var,
                                  cudaStream_t stream);
cudaError_t batch_norm_update(const float* mean, const float* var, std::size_t channels,
                              float momentum, float unbias, float eps, float* running_mean,
                              float* running_var, float* inv_std, cudaStream_t stream);
cudaError_t batch_norm_forward(const float* x, std::size_t samples, std::size_t channels,
                               std::size_t spatial, const float* mean, const float* inv_std,
                               const float* gamma, const float* beta, float* y,
                               cudaStream_t stream);
cudaError_t batch_norm_backward(const float* x, const float* dy, std::size_t samples,
                                std::size_t channels, std::size_t spatial, const float* mean,
                                const float* inv_std, const float* gamma, float* dx, float* dgamma,
                                float* dbeta, cudaStream_t stream);

/// One thread per row: dlogits as SoftmaxCrossEntropy::forward_backward, and row_losses[k] =
/// log(sum_c exp(z_c - max)) - (z_label - max) in double (the host sums them in row order).
cudaError_t softmax_cross_entropy(const float* logits, const std::int32_t* labels,
                                  std::size_t batch, std::size_t classes, float* dlogits,
                                  double* row_losses, cudaStream_t stream);

}  // namespace gradmesh::tasks::cuda::kernels
