#pragma once
// A test backend that computes with the CPU backend's kernels but says it is a device
// (host_addressable() == false), so a Model takes its device path — separate device buffers,
// pinned-staging copies, stale-parameter uploads, gradient downloads, the device-side update
// path — on any machine. It counts the copies and their bytes so tests can see the staging
// protocol at work (atomic counters: SFB's send task downloads on a network thread).

#include <atomic>
#include <cstddef>
#include <string>

#include "tasks/backend.h"
#include "tasks/cpu/cpu_backend.h"

namespace gradmesh::tasks::testing {

class EmulatedDevice : public Backend {
 public:
  std::atomic<std::size_t> uploads = 0;         ///< copy_to_device calls
  std::atomic<std::size_t> downloads = 0;       ///< copy_to_host calls
  std::atomic<std::size_t> uploaded_bytes = 0;  ///< bytes of all copy_to_device calls
  std::atomic<std::size_t> downloaded_bytes = 0;

  [[nodiscard]] std::string_view name() const noexcept override { return "emulated"; }
  [[nodiscard]] std::string description() const override { return "emulated device"; }
  [[nodiscard]] bool host_addressable() const noexcept override { return false; }

  std::pair<void*, Buffer<std::byte>::Release> allocate_bytes(std::size_t bytes,
                                                              MemoryKind kind) override {
    return cpu_.allocate_bytes(bytes, kind);
  }
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    ++uploads;
    uploaded_bytes += bytes;
    cpu_.copy_to_device(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    ++downloads;
    downloaded_bytes += bytes;
    cpu_.copy_to_host(dst, src, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override { cpu_.copy(dst, src, bytes); }
  /// The host's convolution kernels (oneDNN's where chosen), so that the emulated device computes
  /// what the host does.
  std::unique_ptr<ConvolutionKernels> make_convolution(const Im2colGeometry& g, std::size_t filters,
                                                       std::size_t max_batch) override {
    return cpu_.make_convolution(g, filters, max_batch);
  }
  /// The host's batch normalization kernels likewise.
  std::unique_ptr<BatchNormKernels> make_batch_norm(std::size_t channels, std::size_t spatial,
                                                    std::size_t max_batch, float eps) override {
    return cpu_.make_batch_norm(channels, spatial, max_batch, eps);
  }
  void copy_rows(float* dst, std::size_t dst_stride, const float* src, std::size_t src_stride,
                 std::size_t cols, std::size_t rows) override {
    cpu_.copy_rows(dst, dst_stride, src, src_stride, cols, rows);
  }
  void synchronize() override {}
  void sgemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
             const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
             std::size_t ldc) override {
    cpu_.sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void broadcast_rows(const float* row, std::size_t rows, std::size_t cols, float* y) override {
    cpu_.broadcast_rows(row, rows, cols, y);
  }
  void column_sums(const float* a, std::size_t rows, std::size_t cols, float* sums) override {
    cpu_.column_sums(a, rows, cols, sums);
  }
  void multiply(const float* a, const float* b, std::size_t n, float* y) override {
    cpu_.multiply(a, b, n, y);
  }
  void dropout_forward(const float* x, std::size_t n, std::uint64_t seed, float p, float scale,
                       float* mask, float* y) override {
    cpu_.dropout_forward(x, n, seed, p, scale, mask, y);
  }
  void relu_forward(const float* x, std::size_t n, float* y) override {
    cpu_.relu_forward(x, n, y);
  }
  void relu_backward(const float* y, const float* dy, std::size_t n, float* dx) override {
    cpu_.relu_backward(y, dy, n, dx);
  }
  void im2col(const float* x, std::size_t samples, const Im2colGeometry& g, float* col,
              std::size_t ld) override {
    cpu_.im2col(x, samples, g, col, ld);
  }
  void col2im(const float* dcol, std::size_t ld, std::size_t samples, const Im2colGeometry& g,
              float* dx) override {
    cpu_.col2im(dcol, ld, samples, g, dx);
  }
  void unpack_channels_add_bias(const float* out, std::size_t ld, std::size_t samples,
                                std::size_t filters, std::size_t positions, const float* bias,
                                float* y) override {
    cpu_.unpack_channels_add_bias(out, ld, samples, filters, positions, bias, y);
  }
  void pack_channels(const float* dy, std::size_t samples, std::size_t filters,
                     std::size_t positions, float* out, std::size_t ld, float* bias_sums) override {
    cpu_.pack_channels(dy, samples, filters, positions, out, ld, bias_sums);
  }
  void fill(float* dst, std::size_t n, float value) override { cpu_.fill(dst, n, value); }
  void scale(float* x, std::size_t n, float alpha) override { cpu_.scale(x, n, alpha); }
  void accumulate(float* sum, const float* x, std::size_t n) override {
    cpu_.accumulate(sum, x, n);
  }
  void sgd_step(float* w, const float* g, float* velocity, std::size_t n,
                const SgdOptions& options) override {
    cpu_.sgd_step(w, g, velocity, n, options);
  }
  void adam_step(float* w, const float* g, float* m, float* v, std::size_t n,
                 const AdamOptions& options, const AdamStep& step) override {
    cpu_.adam_step(w, g, m, v, n, options, step);
  }
  void max_pool_forward(const float* x, std::size_t planes, const PoolGeometry& g, float* y,
                        std::uint32_t* argmax) override {
    cpu_.max_pool_forward(x, planes, g, y, argmax);
  }
  void max_pool_backward(const float* dy, const std::uint32_t* argmax, std::size_t planes,
                         const PoolGeometry& g, float* dx) override {
    cpu_.max_pool_backward(dy, argmax, planes, g, dx);
  }
  void avg_pool_forward(const float* x, std::size_t planes, const PoolGeometry& g,
                        float* y) override {
    cpu_.avg_pool_forward(x, planes, g, y);
  }
  void avg_pool_backward(const float* dy, std::size_t planes, const PoolGeometry& g,
                         float* dx) override {
    cpu_.avg_pool_backward(dy, planes, g, dx);
  }
  void batch_norm_statistics(const float* x, std::size_t samples, std::size_t channels,
                             std::size_t spatial, float* mean, float* var) override {
    cpu_.batch_norm_statistics(x, samples, channels, spatial, mean, var);
  }
  void batch_norm_update(const float* mean, const float* var, std::size_t channels, float momentum,
                         float unbias, float eps, float* running_mean, float* running_var,
                         float* inv_std) override {
    cpu_.batch_norm_update(mean, var, channels, momentum, unbias, eps, running_mean, running_var,
                           inv_std);
  }
  void batch_norm_forward(const float* x, std::size_t samples, std::size_t channels,
                          std::size_t spatial, const float* mean, const float* inv_std,
                          const float* gamma, const float* beta, float* y) override {
    cpu_.batch_norm_forward(x, samples, channels, spatial, mean, inv_std, gamma, beta, y);
  }
  void batch_norm_backward(const float* x, const float* dy, std::size_t samples,
                           std::size_t channels, std::size_t spatial, const float* mean,
                           const float* inv_std, const float* gamma, float* dx, float* dgamma,
                           float* dbeta) override {
    cpu_.batch_norm_backward(x, dy, samples, channels, spatial, mean, inv_std, gamma, dx, dgamma,
                             dbeta);
  }
  float softmax_cross_entropy(const float* logits, std::span<const std::int32_t> labels,
                              std::size_t classes, float* dlogits) override {
    return cpu_.softmax_cross_entropy(logits, labels, classes, dlogits);
  }

 private:
  cpu::CpuBackend cpu_;
};

}  // namespace gradmesh::tasks::testing
