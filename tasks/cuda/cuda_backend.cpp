#include "tasks/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/error.h"
#include "tasks/cuda/codec_kernels.h"
#include "tasks/cuda/kernels.h"

namespace gradmesh::tasks::cuda {
namespace {

std::string describe(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw DeviceError(std::string("cuda backend: ") + what + ": " + describe(e));
}

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw DeviceError(std::string("cuda backend: ") + what + ": cuBLAS status " +
                      std::to_string(static_cast<int>(s)));
  }
}

void release_device(void* p) noexcept { cudaFree(p); }
void release_pinned(void* p) noexcept { cudaFreeHost(p); }

kernels::ConvShape conv_shape(const Im2colGeometry& g) {
  return {g.channels, g.height, g.width, g.kernel, g.stride, g.padding, g.out_height, g.out_width};
}

kernels::PoolShape pool_shape(const PoolGeometry& g) {
  return {g.height, g.width, g.window, g.stride, g.out_height, g.out_width};
}

/// Backend on CUDA device 0 (see make_cuda_backend). Thread safety: as Backend.
class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    check(cudaSetDevice(0), "cudaSetDevice(0)");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    description_ = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                   std::to_string(prop.minor) + "), " + std::to_string(prop.totalGlobalMem >> 30) +
                   " GiB";
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    if (const cublasStatus_t s = cublasCreate(&blas_); s != CUBLAS_STATUS_SUCCESS) {
      cudaStreamDestroy(stream_);
      check(s, "cublasCreate");
    }
    cublasSetStream(blas_, stream_);
    cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH);
    square_partials_ = allocate<double>(kernels::kSquarePartials);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }

  [[nodiscard]] std::string_view name() const noexcept override { return "cuda"; }
  [[nodiscard]] std::string description() const override { return description_; }
  [[nodiscard]] bool host_addressable() const noexcept override { return false; }

  std::pair<void*, Buffer<std::byte>::Release> allocate_bytes(std::size_t bytes,
                                                              MemoryKind kind) override {
    if (kind == MemoryKind::kHostStaging) {
      if (bytes == 0) return {nullptr, &release_pinned};
      void* p = nullptr;
      check(cudaMallocHost(&p, bytes), "cudaMallocHost");
      std::memset(p, 0, bytes);
      return {p, &release_pinned};
    }
    if (bytes == 0) return {nullptr, &release_device};
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    // Zeroed on the backend's own stream, so the zeroing is ordered before every copy and kernel
    // enqueued on it later. A plain cudaMemset goes to the legacy default stream, with which a
    // cudaStreamNonBlocking stream never synchronizes: it may run AFTER a later copy_to_device
    // into the new buffer (GlobalAvgPool's vector of ones, BatchNorm's running variance) and
    // zero what that copy wrote, and synchronize() (cudaStreamSynchronize(stream_)) does not
    // wait for it.
    if (const cudaError_t e = cudaMemsetAsync(p, 0, bytes, stream_); e != cudaSuccess) {
      cudaFree(p);
      check(e, "cudaMemsetAsync");
    }
    return {p, &release_device};
  }

  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "copy to host");
    check(cudaStreamSynchronize(stream_), "copy to host (wait)");
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "device copy");
  }
  void copy_rows(float* dst, std::size_t dst_stride, const float* src, std::size_t src_stride,
                 std::size_t cols, std::size_t rows) override {
    if (cols == 0 || rows == 0) return;
    check(cudaMemcpy2DAsync(dst, dst_stride * sizeof(float), src, src_stride * sizeof(float),
                            cols * sizeof(float), rows, cudaMemcpyDeviceToDevice, stream_),
          "copy_rows");
  }
  void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

  void sgemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
             const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
             std::size_t ldc) override {
    if (m == 0 || n == 0) return;
    // Row-major C (m x n) is column-major C^T (n x m) = op(B)^T op(A)^T: swap the operands.
    check(cublasSgemm(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                      trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                      static_cast<int>(k), &alpha, b, static_cast<int>(ldb), a,
                      static_cast<int>(lda), &beta, c, static_cast<int>(ldc)),
          "cublasSgemm");
  }

  void broadcast_rows(const float* row, std::size_t rows, std::size_t cols, float* y) override {
    check(kernels::broadcast_rows(row, rows, cols, y, stream_), "broadcast_rows");
  }
  void column_sums(const float* a, std::size_t rows, std::size_t cols, float* sums) override {
    check(kernels::column_sums(a, rows, cols, sums, stream_), "column_sums");
  }
  void multiply(const float* a, const float* b, std::size_t n, float* y) override {
    check(kernels::multiply(a, b, n, y, stream_), "multiply");
  }
  void dropout_forward(const float* x, std::size_t n, std::uint64_t seed, float p, float scale,
                       float* mask, float* y) override {
    check(kernels::dropout_forward(x, n, seed, p, scale, mask, y, stream_), "dropout_forward");
  }
  void relu_forward(const float* x, std::size_t n, float* y) override {
    check(kernels::relu_forward(x, n, y, stream_), "relu_forward");
  }
  void relu_backward(const float* y, const float* dy, std::size_t n, float* dx) override {
    check(kernels::relu_backward(y, dy, n, dx, stream_), "relu_backward");
  }
  void im2col(const float* x, std::size_t samples, const Im2colGeometry& g, float* col,
              std::size_t ld) override {
    check(kernels::im2col(x, samples, conv_shape(g), col, ld, stream_), "im2col");
  }
  void col2im(const float* dcol, std::size_t ld, std::size_t samples, const Im2colGeometry& g,
              float* dx) override {
    check(kernels::col2im(dcol, ld, samples, conv_shape(g), dx, stream_), "col2im");
  }
  void unpack_channels_add_bias(const float* out, std::size_t ld, std::size_t samples,
                                std::size_t filters, std::size_t positions, const float* bias,
                                float* y) override {
    check(kernels::unpack_channels_add_bias(out, ld, samples, filters, positions, bias, y, stream_),
          "unpack_channels_add_bias");
  }
  void pack_channels(const float* dy, std::size_t samples, std::size_t filters,
                     std::size_t positions, float* out, std::size_t ld, float* bias_sums) override {
    check(kernels::pack_channels(dy, samples, filters, positions, out, ld, bias_sums, stream_),
          "pack_channels");
  }
  void fill(float* dst, std::size_t n, float value) override {
    check(kernels::fill(dst, n, value, stream_), "fill");
  }
  void scale(float* x, std::size_t n, float alpha) override {
    check(kernels::scale(x, n, alpha, stream_), "scale");
  }
  void sgd_step(float* w, const float* g, float* velocity, std::size_t n,
                const SgdOptions& options) override {
    check(kernels::sgd_step(w, g, velocity, n, options.lr, options.momentum, options.weight_decay,
                            stream_),
          "sgd_step");
  }
  void adam_step(float* w, const float* g, float* m, float* v, std::size_t n,
                 const AdamOptions& options, const AdamStep& step) override {
    check(kernels::adam_step(w, g, m, v, n, step.lr, step.weight_decay, options.beta1,
                             options.beta2, options.eps, options.decoupled, step.correction1,
                             step.correction2, stream_),
          "adam_step");
  }
  void max_pool_forward(const float* x, std::size_t planes, const PoolGeometry& g, float* y,
                        std::uint32_t* argmax) override {
    check(kernels::max_pool_forward(x, planes, pool_shape(g), y, argmax, stream_),
          "max_pool_forward");
  }
  void max_pool_backward(const float* dy, const std::uint32_t* argmax, std::size_t planes,
                         const PoolGeometry& g, float* dx) override {
    check(kernels::max_pool_backward(dy, argmax, planes, pool_shape(g), dx, stream_),
          "max_pool_backward");
  }
  void batch_norm_statistics(const float* x, std::size_t samples, std::size_t channels,
                             std::size_t spatial, float* mean, float* var) override {
    check(kernels::batch_norm_statistics(x, samples, channels, spatial, mean, var, stream_),
          "batch_norm_statistics");
  }
  void batch_norm_update(const float* mean, const float* var, std::size_t channels, float momentum,
                         float unbias, float eps, float* running_mean, float* running_var,
                         float* inv_std) override {
    check(kernels::batch_norm_update(mean, var, channels, momentum, unbias, eps, running_mean,
                                     running_var, inv_std, stream_),
          "batch_norm_update");
  }
  void batch_norm_forward(const float* x, std::size_t samples, std::size_t channels,
                          std::size_t spatial, const float* mean, const float* inv_std,
                          const float* gamma, const float* beta, float* y) override {
    check(kernels::batch_norm_forward(x, samples, channels, spatial, mean, inv_std, gamma, beta, y,
                                      stream_),
          "batch_norm_forward");
  }
  void batch_norm_backward(const float* x, const float* dy, std::size_t samples,
                           std::size_t channels, std::size_t spatial, const float* mean,
                           const float* inv_std, const float* gamma, float* dx, float* dgamma,
                           float* dbeta) override {
    check(kernels::batch_norm_backward(x, dy, samples, channels, spatial, mean, inv_std, gamma, dx,
                                       dgamma, dbeta, stream_),
          "batch_norm_backward");
  }
  void avg_pool_forward(const float* x, std::size_t planes, const PoolGeometry& g,
                        float* y) override {
    check(kernels::avg_pool_forward(x, planes, pool_shape(g), y, stream_), "avg_pool_forward");
  }
  void avg_pool_backward(const float* dy, std::size_t planes, const PoolGeometry& g,
                         float* dx) override {
    check(kernels::avg_pool_backward(dy, planes, pool_shape(g), dx, stream_), "avg_pool_backward");
  }

  float softmax_cross_entropy(const float* logits, std::span<const std::int32_t> labels,
                              std::size_t classes, float* dlogits) override {
    const std::size_t batch = labels.size();
    if (batch == 0 || classes == 0) return 0.0f;
    for (const std::int32_t label : labels) {
      GRADMESH_CHECK(label >= 0 && static_cast<std::size_t>(label) < classes,
                     "softmax_cross_entropy: label " + std::to_string(label) + " outside [0, " +
                         std::to_string(classes) + ")");
    }
    if (batch > loss_capacity_) {  // grows once, to the largest batch seen
      labels_ = allocate<std::int32_t>(batch);
      row_losses_ = allocate<double>(batch);
      host_labels_ = allocate<std::int32_t>(batch, MemoryKind::kHostStaging);
      host_losses_ = allocate<double>(batch, MemoryKind::kHostStaging);
      loss_capacity_ = batch;
    }
    std::memcpy(host_labels_.data(), labels.data(), batch * sizeof(std::int32_t));
    copy_to_device(labels_.data(), host_labels_.data(), batch * sizeof(std::int32_t));
    check(kernels::softmax_cross_entropy(logits, labels_.data(), batch, classes, dlogits,
                                         row_losses_.data(), stream_),
          "softmax_cross_entropy");
    copy_to_host(host_losses_.data(), row_losses_.data(), batch * sizeof(double));
    double total = 0.0;
    for (std::size_t k = 0; k < batch; ++k) total += host_losses_.data()[k];
    return static_cast<float>(total / static_cast<double>(batch));
  }

  // ---- gradient codecs (codec_kernels.cu) ----
  void accumulate(float* sum, const float* x, std::size_t n) override {
    check(kernels::accumulate(sum, x, n, stream_), "accumulate");
  }
  void sum_squares(const float* x, std::size_t n, double* out) override {
    check(kernels::sum_squares(x, n, square_partials_.data(), out, stream_), "sum_squares");
  }
  void encode_half(HalfFormat format, float* p, std::size_t n, std::uint16_t* out) override {
    check(kernels::encode_half(format == HalfFormat::kBf16, p, n, out, stream_), "encode_half");
  }
  void decode_half(HalfFormat format, const std::uint16_t* in, std::size_t n, float* out,
                   bool add) override {
    check(kernels::decode_half(format == HalfFormat::kBf16, in, n, out, add, stream_),
          "decode_half");
  }
  void encode_int8(float* p, std::size_t n, std::size_t chunk, float* scales,
                   std::int8_t* values) override {
    check(kernels::encode_int8(p, n, chunk, scales, values, stream_), "encode_int8");
  }
  void decode_int8(const float* scales, const std::int8_t* values, std::size_t n, std::size_t chunk,
                   float* out, bool add) override {
    check(kernels::decode_int8(scales, values, n, chunk, out, add, stream_), "decode_int8");
  }
  [[nodiscard]] std::size_t top_k_scratch_bytes(std::size_t n) override {
    return kernels::top_k_scratch_bytes(n);
  }
  void top_k(const float* p, std::size_t n, std::size_t k, std::uint32_t* indices,
             std::byte* scratch) override {
    check(kernels::top_k(p, n, k, indices, scratch, stream_), "top_k");
  }
  void random_k(std::uint64_t stream, std::size_t n, std::size_t k,
                std::uint32_t* indices) override {
    check(kernels::random_k(stream, n, k, indices, stream_), "random_k");
  }
  void gather_and_zero(float* p, const std::uint32_t* indices, std::size_t k,
                       float* values) override {
    check(kernels::gather_and_zero(p, indices, k, values, stream_), "gather_and_zero");
  }
  void scatter_add(const std::uint32_t* indices, const float* values, std::size_t k,
                   float* out) override {
    check(kernels::scatter_add(indices, values, k, out, stream_), "scatter_add");
  }

 private:
  std::string description_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::size_t loss_capacity_ = 0;
  Buffer<std::int32_t> labels_;
  Buffer<double> row_losses_;
  Buffer<std::int32_t> host_labels_;
  Buffer<double> host_losses_;
  Buffer<double> square_partials_;  // sum_squares's per-block sums
};

}  // namespace

std::string DeviceProbe::reason() const {
  if (count > 0) return {};
  std::string what =
      "compute.device = \"cuda\": no CUDA GPU visible to this process: "
      "cudaGetDeviceCount ";
  what += error.empty() ? "found 0 devices" : "failed with " + error;
  return what +
         " (looked for CUDA devices through the CUDA runtime; check the NVIDIA driver and "
         "CUDA_VISIBLE_DEVICES, or use compute.device = \"cpu\")";
}

DeviceProbe probe_devices() noexcept {
  DeviceProbe probe;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    probe.error = describe(e);
    cudaGetLastError();  // clear the sticky-free error state for later calls
    return probe;
  }
  probe.count = count;
  return probe;
}

std::unique_ptr<Backend> make_cuda_backend() {
  const DeviceProbe probe = probe_devices();
  if (probe.count <= 0) throw ConfigError(probe.reason());
  return std::make_unique<CudaBackend>();
}

}  // namespace gradmesh::tasks::cuda

gradmesh::tasks::Backend* gradmesh_cuda_make_backend() {
  return gradmesh::tasks::cuda::make_cuda_backend().release();
}
