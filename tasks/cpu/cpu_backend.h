#pragma once
// The CPU compute backend: host memory, GEMM on oneDNN or OpenBLAS (tasks/cpu/blas.h) and plain
// loops.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "tasks/backend.h"

namespace gradmesh::tasks::cpu {

/// Backend on the host: device memory is host memory (host_addressable()), so "copies" are
/// memcpy and synchronize() does nothing; kernels run to completion before they return. GEMM:
/// cpu::sgemm (oneDNN's or OpenBLAS's, as set_kernels chose). The loops over samples, channels or
/// planes (im2col/col2im, the channel packing, ReLU, batch normalization, pooling) split their
/// items across set_threads()' oneTBB arena, each item computed whole by one thread in the serial
/// order, so results are bitwise the same for any thread count; a layer's chunks (run_chunks:
/// Conv2d's) run side by side over the same arena, each on one thread with OpenBLAS single-threaded
/// meanwhile. Stateless: several Models may share the work of one CpuBackend; thread safety as
/// OpenBLAS (reentrant).
class CpuBackend final : public Backend {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "cpu"; }
  /// "CPU (oneDNN 2.6.3)" or "CPU (OpenBLAS (SkylakeX kernels))": the kernels set_kernels chose.
  [[nodiscard]] std::string description() const override;
  [[nodiscard]] bool host_addressable() const noexcept override { return true; }

  [[nodiscard]] std::pair<void*, Buffer<std::byte>::Release> allocate_bytes(
      std::size_t bytes, MemoryKind kind) override;
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override;
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void copy_rows(float* dst, std::size_t dst_stride, const float* src, std::size_t src_stride,
                 std::size_t cols, std::size_t rows) override;
  void synchronize() override {}

  void sgemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
             const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
             std::size_t ldc) override;

  void broadcast_rows(const float* row, std::size_t rows, std::size_t cols, float* y) override;
  void column_sums(const float* a, std::size_t rows, std::size_t cols, float* sums) override;
  void multiply(const float* a, const float* b, std::size_t n, float* y) override;
  void dropout_forward(const float* x, std::size_t n, std::uint64_t seed, float p, float scale,
                       float* mask, float* y) override;
  void relu_forward(const float* x, std::size_t n, float* y) override;
  void relu_backward(const float* y, const float* dy, std::size_t n, float* dx) override;
  void im2col(const float* x, std::size_t samples, const Im2colGeometry& g, float* col,
              std::size_t ld) override;
  void col2im(const float* dcol, std::size_t ld, std::size_t samples, const Im2colGeometry& g,
              float* dx) override;
  void unpack_channels_add_bias(const float* out, std::size_t ld, std::size_t samples,
                                std::size_t filters, std::size_t positions, const float* bias,
                                float* y) override;
  void pack_channels(const float* dy, std::size_t samples, std::size_t filters,
                     std::size_t positions, float* out, std::size_t ld, float* bias_sums) override;
  void fill(float* dst, std::size_t n, float value) override;
  void scale(float* x, std::size_t n, float alpha) override;
  void accumulate(float* sum, const float* x, std::size_t n) override;
  void add(const float* a, const float* b, std::size_t n, float* y) override;
  void add_relu(const float* a, const float* b, std::size_t n, float* y) override;
  void sgd_step(float* w, const float* g, float* velocity, std::size_t n,
                const SgdOptions& options) override;
  void adam_step(float* w, const float* g, float* m, float* v, std::size_t n,
                 const AdamOptions& options, const AdamStep& step) override;
  void max_pool_forward(const float* x, std::size_t planes, const PoolGeometry& g, float* y,
                        std::uint32_t* argmax) override;
  void max_pool_backward(const float* dy, const std::uint32_t* argmax, std::size_t planes,
                         const PoolGeometry& g, float* dx) override;
  void avg_pool_forward(const float* x, std::size_t planes, const PoolGeometry& g,
                        float* y) override;
  void avg_pool_backward(const float* dy, std::size_t planes, const PoolGeometry& g,
                         float* dx) override;
  /// oneDNN's convolution primitives (tasks/cpu/onednn_convolution.h) when kernels() is
  /// kOnednn; nullptr (im2col + sgemm) otherwise.
  [[nodiscard]] std::unique_ptr<ConvolutionKernels> make_convolution(
      const Im2colGeometry& g, std::size_t filters, std::size_t max_batch) override;
  /// oneDNN's batch normalization primitives (tasks/cpu/onednn_batch_norm.h) when kernels() is
  /// kOnednn; nullptr (the loops below) otherwise.
  [[nodiscard]] std::unique_ptr<BatchNormKernels> make_batch_norm(std::size_t channels,
                                                                  std::size_t spatial,
                                                                  std::size_t max_batch,
                                                                  float eps) override;
  /// set_threads()' n.
  [[nodiscard]] std::size_t chunk_slots() const noexcept override;
  /// With set_threads(n >= 2), items >= 2 and slots >= 2: min(items, slots, n) workers over the
  /// arena, worker w taking the next item until none is left with slot w; OpenBLAS is set to one
  /// thread while any run_chunks is under way; nested calls (a body's own run_chunks, the kernels'
  /// loops) run inline. Otherwise in order on the caller, slot 0.
  void run_chunks(std::size_t items, std::size_t slots, ChunkBody body) override;
  void batch_norm_statistics(const float* x, std::size_t samples, std::size_t channels,
                             std::size_t spatial, float* mean, float* var) override;
  void batch_norm_update(const float* mean, const float* var, std::size_t channels, float momentum,
                         float unbias, float eps, float* running_mean, float* running_var,
                         float* inv_std) override;
  void batch_norm_forward(const float* x, std::size_t samples, std::size_t channels,
                          std::size_t spatial, const float* mean, const float* inv_std,
                          const float* gamma, const float* beta, float* y) override;
  void batch_norm_backward(const float* x, const float* dy, std::size_t samples,
                           std::size_t channels, std::size_t spatial, const float* mean,
                           const float* inv_std, const float* gamma, float* dx, float* dgamma,
                           float* dbeta) override;
  float softmax_cross_entropy(const float* logits, std::span<const std::int32_t> labels,
                              std::size_t classes, float* dlogits) override;
};

/// The CPU backend's kernel set (compute.cpu_kernels).
enum class CpuKernels {
  kBuiltin,  ///< OpenBLAS's sgemm and gradmesh's own loops
  kOnednn,   ///< oneDNN's sgemm (dnnl_sgemm), on OpenMP teams of set_threads' n
};

/// Chooses the kernel set for every later call (process-wide, as set_threads; the node sets it
/// from compute.cpu_kernels before it builds its model). Default: kOnednn where the binary was
/// built with oneDNN (cpu::onednn_built()), else kBuiltin. Thread-safe. Throws ConfigError naming
/// compute.cpu_kernels for kOnednn in a build without oneDNN.
void set_kernels(CpuKernels kernels);
/// The kernel set chosen now. Thread-safe.
[[nodiscard]] CpuKernels kernels() noexcept;
/// "onednn" or "builtin": the value of compute.cpu_kernels that chooses `kernels`.
[[nodiscard]] const char* to_string(CpuKernels kernels) noexcept;

/// The blocked layout oneDNN's convolutions prefer on this CPU (asked once, of a 16-channel 3x3
/// convolution's forward with its layouts left to oneDNN): kBlocked16 on AVX-512, kBlocked8 on
/// AVX2 and SSE4.1; kNchw in a build without oneDNN or where oneDNN prefers no blocked layout. The
/// Model keeps activations in it on oneDNN's kernels (Model::layout). Thread-safe.
[[nodiscard]] Layout preferred_blocked_layout() noexcept;
/// What oneDNN runs on this CPU in that layout, e.g. "convolutions jit:avx2 and batch norms
/// bnorm_jit:avx2 on nChw8c" (a "ref:" implementation there is oneDNN's slow reference loops);
/// empty in a build without oneDNN. Thread-safe.
[[nodiscard]] std::string onednn_kernel_names();

/// Threads of the CPU backend's compute: sgemm's (set_blas_threads: OpenBLAS's, or oneDNN's
/// OpenMP team) and the kernels' parallel loops' (a oneTBB arena of n slots, which the calling
/// thread joins; n = 1 runs them inline, the default). The node sets it from `compute.threads`.
/// Process-wide; thread-safe (a loop under way finishes on the arena it started on). Throws
/// ConfigError when n < 1.
void set_threads(int n);

/// The n of the last set_threads (1 before any). Thread-safe.
[[nodiscard]] int threads() noexcept;

/// Whether oneDNN's convolutions run a call on a team of n >= 2 threads as n batch slices side by
/// side, each slice's primitives made for one thread, the weights' gradient summed over the
/// slices in slice order (tasks/cpu/onednn_convolution.h), rather than as one primitive on the
/// whole team. On (the default) unless GRADMESH_CONV_SLICES=0 is in the environment at start;
/// set_convolution_slices switches it for later calls (bench_single_node's --ab slices).
/// Process-wide; thread-safe (an atomic).
void set_convolution_slices(bool on) noexcept;
[[nodiscard]] bool convolution_slices() noexcept;

/// Holds OpenBLAS at one thread while it lives: the kernels' parallel chunks (each chunk's GEMM
/// on its own thread) and work of skinny GEMMs measured as training runs them (PowerSGD's passes,
/// sync::compress::profile_powersgd). Holders may nest and overlap across threads; when the last
/// ends OpenBLAS gets set_threads' n again (set_threads meanwhile applies then). Thread-safe;
/// not copyable.
class SingleBlasThread {
 public:
  SingleBlasThread();
  ~SingleBlasThread();
  SingleBlasThread(const SingleBlasThread&) = delete;
  SingleBlasThread& operator=(const SingleBlasThread&) = delete;
};

/// The CPU backend a Layer computes on until a Model gives it its own (Layer::set_backend), so a
/// layer built alone (tests, tools) works on host pointers. A stateless process-wide object, not
/// configuration: it holds nothing to configure. Thread safety: as CpuBackend.
[[nodiscard]] Backend& host_backend() noexcept;

}  // namespace gradmesh::tasks::cpu
