#pragma once
// The compute backend a Model owns: the memory of one device and the kernels the layers run on it
// (DESIGN.md "Tensors have shapes and live on a device"). tasks/cpu/ implements it on host memory
// and OpenBLAS, tasks/cuda/ on a CUDA GPU with cuBLAS and its own kernels.
//
// Besides the layers' kernels it runs the device-side update path: a sync stage that forms a
// layer's final gradient on the node from small inputs (Poseidon's SFB: sync/poseidon/) rebuilds
// it with this backend's sgemm / column_sums / scale into the Model's device gradients, and the
// node's Optimizer steps the layer with sgd_step on a device-resident velocity
// (Optimizer::keep_on_device). The Model then holds that layer's parameters current on the device
// (Model::device_layer_parameters; the protocol is in the Model class comment).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "engine/error.h"
#include "tasks/optim/adam.h"
#include "tasks/optim/sgd.h"

namespace gradmesh::tasks {

/// A device operation failed at run time (out of device memory, a kernel or copy failed). The
/// message names the operation and the device's error string. Thread safety: immutable.
class DeviceError : public Error {
 public:
  using Error::Error;
};

/// Where a Buffer lives.
enum class MemoryKind {
  kDevice,       ///< the backend's device memory: only the backend's kernels and copies touch it
  kHostStaging,  ///< host memory the device copies to and from fast (pinned, cudaMallocHost)
};

/// Owning handle to `size()` elements of T allocated by a Backend (Backend::allocate). Freed with
/// the function the backend gave, so a Buffer may outlive the Backend object that made it (not the
/// process's device context). Move-only; a moved-from Buffer is empty. Zero-filled on allocation.
template <typename T>
class Buffer {
 public:
  using Release = void (*)(void*) noexcept;

  Buffer() noexcept = default;
  /// Takes ownership of `data` (count elements of T), freed by release(data).
  Buffer(T* data, std::size_t count, Release release) noexcept
      : data_(data), size_(count), release_(release) {}
  Buffer(Buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        release_(std::exchange(o.release_, nullptr)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      release_ = std::exchange(o.release_, nullptr);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  /// The elements (a device address for MemoryKind::kDevice on a device backend: never
  /// dereference it on the host there). nullptr when empty.
  [[nodiscard]] T* data() const noexcept { return data_; }
  /// Number of elements of T.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// All elements as a span (same caveat as data()).
  [[nodiscard]] std::span<T> span() const noexcept { return {data_, size_}; }

 private:
  void reset() noexcept {
    if (data_ != nullptr && release_ != nullptr) release_(data_);
    data_ = nullptr;
    size_ = 0;
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
  Release release_ = nullptr;
};

/// Geometry of im2col / col2im for one sample of C x H x W and a square k x k kernel, stride s,
/// zero padding p, giving OH x OW output positions (Conv2d computes them).
struct Im2colGeometry {
  std::size_t channels, height, width;  ///< C, H, W of the input sample
  std::size_t kernel, stride, padding;  ///< k, s, p
  std::size_t out_height, out_width;    ///< OH, OW
  /// C k k: rows of a column matrix.
  [[nodiscard]] constexpr std::size_t patch() const noexcept { return channels * kernel * kernel; }
  /// OH OW: columns of one sample in a column matrix.
  [[nodiscard]] constexpr std::size_t positions() const noexcept { return out_height * out_width; }
  /// C H W: floats of one input sample.
  [[nodiscard]] constexpr std::size_t sample_size() const noexcept {
    return channels * height * width;
  }
};

/// How a batch of activations (and their gradients) lies in memory. The Model chooses per
/// activation (Model::layout): blocked only on the CPU backend with oneDNN's kernels, between
/// layers that all take it, so that a chain of convolutions, batch norms, ReLUs and adds runs in
/// oneDNN's own layout with no reorder between them.
/// The two blocked layouts are the ones oneDNN's convolutions prefer: nChw16c where the CPU has
/// AVX-512 (a block is one 16-float vector), nChw8c on AVX2 (oneDNN's batch norm runs only its
/// reference loops on nChw16c there, 100x slower); cpu::preferred_blocked_layout() asks oneDNN.
enum class Layout : std::uint8_t {
  kNchw,       ///< batch x C x H x W row-major: every layer's default, the only one off the CPU
  kBlocked8,   ///< oneDNN's nChw8c, C % 8 == 0: as kBlocked16 with blocks of 8 channels
  kBlocked16,  ///< oneDNN's nChw16c, C % 16 == 0: channel c of pixel p (of H W) of sample n at
               ///< ((n C / 16 + c / 16) H W + p) 16 + c % 16
};

/// Channels a block of `layout`: 8 or 16, 0 for kNchw.
[[nodiscard]] constexpr std::size_t channel_block(Layout layout) noexcept {
  return layout == Layout::kBlocked16 ? 16 : layout == Layout::kBlocked8 ? 8 : 0;
}

/// A backend's own kernels for one 2-d convolution (Conv2d's: NCHW samples, weights F x C x k x k
/// row-major, bias F), made once per layer by Backend::make_convolution, as a cuDNN descriptor or
/// an FFTW plan is: the CPU backend's are oneDNN's primitives (tasks/cpu/onednn_convolution.h).
/// Pointers are the backend's device memory; sizes as Conv2d documents. Thread safety: none (one
/// layer's). forward and backward never allocate in gradmesh's code for a batch size met before
/// (a new size builds its primitives once). Errors: DeviceError naming the library's failure.
class ConvolutionKernels {
 public:
  ConvolutionKernels() = default;
  ConvolutionKernels(const ConvolutionKernels&) = delete;
  ConvolutionKernels& operator=(const ConvolutionKernels&) = delete;
  virtual ~ConvolutionKernels() = default;
  /// y (batch x F x OH x OW) = conv(x (batch x C x H x W), w) + b; batch <= the max_batch made for.
  virtual void forward(const float* x, const float* w, const float* b, float* y,
                       std::size_t batch) = 0;
  /// Given the forward just before on the same x: dw (F C k k) and db (F), overwritten, when
  /// non-null; dx (batch x C x H x W), overwritten, when non-null.
  virtual void backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                        float* db, std::size_t batch) = 0;
  /// The layouts of x and dx (input) and of y and dy (output) from now on (NCHW until called).
  /// Called at set-up (the Model's Layer::set_layouts).
  virtual void set_layouts(Layout input, Layout output) = 0;
};

/// A backend's own kernels for one batch normalization (BatchNorm's: Ioffe and Szegedy, ICML'15,
/// Alg. 1 in training, Alg. 2 in evaluation), made once per layer by Backend::make_batch_norm:
/// the CPU backend's are oneDNN's primitives (tasks/cpu/onednn_batch_norm.h). x, y, dx, dy:
/// batch x C x S floats (S = H W) in the layout set_layout gave (NCHW until called); mean, var,
/// gamma, beta, dgamma, dbeta: C floats. With set_relu(true) (the Model's fusion of a ReLU that
/// takes only this layer's output, issue 55) forward writes max(0, y) and backward takes dy as the
/// gradient wrt that ReLU's output (forward_training keeps the mask for it). Pointers are the
/// backend's memory. Thread safety: none (one layer's). Never allocate in gradmesh's code for a
/// batch size met before. Errors: DeviceError naming the library's failure.
class BatchNormKernels {
 public:
  BatchNormKernels() = default;
  BatchNormKernels(const BatchNormKernels&) = delete;
  BatchNormKernels& operator=(const BatchNormKernels&) = delete;
  virtual ~BatchNormKernels() = default;
  /// Training: y = gamma (x - mu_B) / sqrt(var_B + eps) + beta per channel, writing the batch's
  /// mean mu_B and biased variance var_B.
  virtual void forward_training(const float* x, const float* gamma, const float* beta, float* y,
                                float* mean, float* var, std::size_t batch) = 0;
  /// Evaluation: y from the given mean and var (the running statistics).
  virtual void forward_inference(const float* x, const float* mean, const float* var,
                                 const float* gamma, const float* beta, float* y,
                                 std::size_t batch) = 0;
  /// Given forward_training just before on the same x (its mean and var): dgamma = sum dy x_hat,
  /// dbeta = sum dy and, when dx is non-null, dx = gamma / sqrt(var + eps) (dy - dbeta / M -
  /// x_hat dgamma / M), M = batch S; all overwritten.
  virtual void backward(const float* x, const float* dy, const float* mean, const float* var,
                        const float* gamma, const float* beta, float* dx, float* dgamma,
                        float* dbeta, std::size_t batch) = 0;
  /// The layout of x, y, dx and dy from now on. Called at set-up.
  virtual void set_layout(Layout layout) = 0;
  /// Whether forward applies a ReLU (see the class comment). Called at set-up.
  virtual void set_relu(bool relu) = 0;
};

/// The 16-bit float formats of the gradient codecs (Backend::encode_half).
enum class HalfFormat : std::uint8_t {
  kFp16,  ///< IEEE 754 binary16
  kBf16,  ///< bfloat16 (a float's top 16 bits)
};

/// Geometry of max pooling over one plane of H x W, window x window squares, stride s, no
/// padding, giving OH x OW outputs.
struct PoolGeometry {
  std::size_t height, width;          ///< H, W of an input plane
  std::size_t window, stride;         ///< window, s
  std::size_t out_height, out_width;  ///< OH, OW
};

/// A non-owning reference to a callable body(item, slot) that Backend::run_chunks runs: the
/// callable must outlive the call. Two words, never allocates (a std::function of a lambda that
/// captures a layer's locals would). Thread safety: as the callable.
class ChunkBody {
 public:
  template <class F>
  // NOLINTNEXTLINE(google-explicit-constructor): built at the call, as a function_ref is
  ChunkBody(F& body) noexcept
      : body_(&body), call_([](void* b, std::size_t item, std::size_t slot) {
          (*static_cast<F*>(b))(item, slot);
        }) {}
  void operator()(std::size_t item, std::size_t slot) const { call_(body_, item, slot); }

 private:
  void* body_;
  void (*call_)(void*, std::size_t, std::size_t);
};

/// The kernels and memory of one compute device. Every pointer argument of a kernel is device
/// memory of this backend (MemoryKind::kDevice; on the CPU backend, any host memory), sizes are in
/// elements, matrices are row-major. Kernels are enqueued in order on the backend's one stream:
/// they may return before they ran (CUDA) and see each other's results in call order; what reads
/// results on the host (copy_to_host, softmax_cross_entropy's loss, synchronize) waits for
/// everything enqueued before it.
///
/// Thread safety: none; one thread drives a backend at a time (the Model's). Errors: a failing
/// device call throws DeviceError naming it; bad sizes are the caller's contract (not checked in
/// kernels). Kernels never allocate (a backend may grow scratch for softmax_cross_entropy's labels
/// on its first call with a larger batch).
class Backend {
 public:
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  virtual ~Backend() = default;

  /// "cpu" or "cuda": the value of compute.device that chose it.
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  /// A line saying which device this is ("CPU (OpenBLAS)", "NVIDIA H100 (sm_90), 79 GiB").
  [[nodiscard]] virtual std::string description() const = 0;
  /// Whether device memory is host memory (the CPU backend): then the Model computes in its host
  /// buffers directly and needs no staging copies.
  [[nodiscard]] virtual bool host_addressable() const noexcept = 0;

  // ---- memory ----
  /// Zero-filled bytes of `kind` memory (nullptr for 0 bytes) and the function that frees them.
  /// Throws DeviceError when the device is out of memory. Called at set-up, never per iteration.
  [[nodiscard]] virtual std::pair<void*, Buffer<std::byte>::Release> allocate_bytes(
      std::size_t bytes, MemoryKind kind) = 0;
  /// `count` zero-filled elements of T in `kind` memory.
  template <typename T>
  [[nodiscard]] Buffer<T> allocate(std::size_t count, MemoryKind kind = MemoryKind::kDevice) {
    const auto [p, release] = allocate_bytes(count * sizeof(T), kind);
    return Buffer<T>(static_cast<T*>(p), count, release);
  }
  /// Host (preferably staging) -> device, `bytes`. Asynchronous: src must stay unchanged until
  /// the next call that waits (copy_to_host, synchronize, softmax_cross_entropy).
  virtual void copy_to_device(void* dst, const void* src, std::size_t bytes) = 0;
  /// Device -> host, `bytes`; returns once dst holds the data (after all enqueued work).
  virtual void copy_to_host(void* dst, const void* src, std::size_t bytes) = 0;
  /// Device -> device, `bytes`, enqueued.
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  /// `rows` runs of `cols` floats: dst[r dst_stride + c] = src[r src_stride + c] (strides in
  /// floats, >= cols; the runs must not overlap), enqueued: channel concatenation, sample by
  /// sample (tasks/layers/merge.h).
  virtual void copy_rows(float* dst, std::size_t dst_stride, const float* src,
                         std::size_t src_stride, std::size_t cols, std::size_t rows) = 0;
  /// Waits for everything enqueued.
  virtual void synchronize() = 0;

  // ---- BLAS ----
  /// C = alpha op(A) op(B) + beta C, row-major, exactly as cpu::sgemm documents (op(A) m x k,
  /// op(B) k x n, C m x n; lda/ldb/ldc row strides of A, B, C as stored). Sizes of 0: no-op.
  virtual void sgemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
                     float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
                     float beta, float* c, std::size_t ldc) = 0;

  // ---- element-wise and reductions (dense bias, flatten, dropout) ----
  /// y (rows x cols) = `row` (cols) repeated on every row.
  virtual void broadcast_rows(const float* row, std::size_t rows, std::size_t cols, float* y) = 0;
  /// sums (cols) = column sums of a (rows x cols): sums[j] = sum_i a[i, j], rows in order.
  virtual void column_sums(const float* a, std::size_t rows, std::size_t cols, float* sums) = 0;
  /// y[i] = a[i] * b[i], i < n. y may alias a.
  virtual void multiply(const float* a, const float* b, std::size_t n, float* y) = 0;
  /// Inverted dropout's forward with a fresh mask: for unit i < n, with u_i the i-th float of
  /// SplitMix64(seed) (SplitMix64::next_float; draw i is mix(seed + (i + 1) * golden gamma)),
  /// mask[i] = u_i < p ? 0 : scale and y[i] = x[i] * mask[i]. Identical masks on every backend.
  virtual void dropout_forward(const float* x, std::size_t n, std::uint64_t seed, float p,
                               float scale, float* mask, float* y) = 0;

  // ---- activations ----
  /// y[i] = max(x[i], 0), i < n.
  virtual void relu_forward(const float* x, std::size_t n, float* y) = 0;
  /// dx[i] = y[i] > 0 ? dy[i] : 0, i < n.
  virtual void relu_backward(const float* y, const float* dy, std::size_t n, float* dx) = 0;

  // ---- convolution (Conv2d: im2col + GEMM, Caffe's layout) ----
  /// For s < samples: the receptive fields of sample x + s * g.sample_size() into columns
  /// [s OH OW, (s + 1) OH OW) of col (g.patch() rows, row stride ld >= samples OH OW); row
  /// (c k + u) k + v, column i OW + j holds x[c, i s - p + u, j s - p + v] (0 in the padding).
  virtual void im2col(const float* x, std::size_t samples, const Im2colGeometry& g, float* col,
                      std::size_t ld) = 0;
  /// The adjoint of im2col: dx (samples x C x H x W) = 0, then every element of dcol (layout as
  /// im2col's col) added back to the input pixel it was read from.
  virtual void col2im(const float* dcol, std::size_t ld, std::size_t samples,
                      const Im2colGeometry& g, float* dx) = 0;
  /// y[s, f, i] = out[f, s P + i] + bias[f] for s < samples, f < filters, i < P = positions:
  /// the GEMM's F x (samples P) output (row stride ld) back to NCHW samples, plus the bias.
  virtual void unpack_channels_add_bias(const float* out, std::size_t ld, std::size_t samples,
                                        std::size_t filters, std::size_t positions,
                                        const float* bias, float* y) = 0;
  /// out[f, s P + i] = dy[s, f, i] (the inverse gather of unpack_channels_add_bias) and, when
  /// bias_sums != nullptr, bias_sums[f] += sum_i dy[s, f, i] for each s in order (each sample's
  /// sum formed first).
  virtual void pack_channels(const float* dy, std::size_t samples, std::size_t filters,
                             std::size_t positions, float* out, std::size_t ld,
                             float* bias_sums) = 0;
  /// dst[i] = value, i < n.
  virtual void fill(float* dst, std::size_t n, float value) = 0;
  /// x[i] *= alpha, i < n (the 1/n of the SF rebuild's bias sums).
  virtual void scale(float* x, std::size_t n, float alpha) = 0;
  /// sum[i] += x[i], i < n, each add rounded on its own: a graph's sums (add layers, a tensor
  /// used by two layers gets both gradients) and error feedback's p = g + e.
  virtual void accumulate(float* sum, const float* x, std::size_t n) = 0;
  /// y[i] = a[i] + b[i], i < n, in one pass (an add layer's two inputs). y may alias a, not b.
  /// Default: copy a, then accumulate b (the same bits).
  virtual void add(const float* a, const float* b, std::size_t n, float* y) {
    if (y != a) copy(y, a, n * sizeof(float));
    accumulate(y, b, n);
  }
  /// y[i] = max(a[i] + b[i], 0), i < n: an add with its ReLU fused (issue 55). y may alias a,
  /// not b. Default: add, then relu_forward in place (the same bits).
  virtual void add_relu(const float* a, const float* b, std::size_t n, float* y) {
    add(a, b, n, y);
    relu_forward(y, n, y);
  }

  // ---- optimizer (the device-side update path: tasks/optim/optimizer.h, sync/poseidon) ----
  /// One SGD step on n floats, Sgd::step's arithmetic (tasks/optim/sgd.h, sgd_update): for i < n,
  /// g' = g[i] + options.weight_decay w[i]; v = options.momentum velocity[i] + g';
  /// velocity[i] = v; w[i] -= options.lr v, each operation rounded on its own (no fused
  /// multiply-add). w and velocity are written; g may not alias them. The CPU backend runs
  /// sgd_update itself, so it is bitwise Sgd::step; CUDA uses explicitly rounded intrinsics so it
  /// computes the same bits where the host compiler does not contract either.
  virtual void sgd_step(float* w, const float* g, float* velocity, std::size_t n,
                        const SgdOptions& options) = 0;
  /// One Adam or AdamW step on n floats, adam_update's arithmetic (tasks/optim/adam.h), each
  /// operation rounded on its own: m (first moment) and v (second) and w are written. The CPU
  /// backend runs adam_update itself.
  virtual void adam_step(float* w, const float* g, float* m, float* v, std::size_t n,
                         const AdamOptions& options, const AdamStep& step) = 0;

  // ---- pooling ----
  /// For each of `planes` planes: y[o] = max of the window of output o, argmax[o] = the index of
  /// that max in the input plane (ties: the first in row-major order).
  virtual void max_pool_forward(const float* x, std::size_t planes, const PoolGeometry& g, float* y,
                                std::uint32_t* argmax) = 0;
  /// dx (planes x H x W) = 0, then dx[argmax[o]] += dy[o] per plane (overlapping windows add).
  virtual void max_pool_backward(const float* dy, const std::uint32_t* argmax, std::size_t planes,
                                 const PoolGeometry& g, float* dx) = 0;
  /// For each of `planes` planes: y[o] = the mean of the window of output o (its window^2 inputs
  /// summed in row-major order, times 1 / window^2).
  virtual void avg_pool_forward(const float* x, std::size_t planes, const PoolGeometry& g,
                                float* y) = 0;
  /// dx (planes x H x W): each input the sum of dy[o] / window^2 over the outputs o whose window
  /// covers it, in ascending o (0 where none does).
  virtual void avg_pool_backward(const float* dy, std::size_t planes, const PoolGeometry& g,
                                 float* dx) = 0;

  /// This backend's own kernels for a convolution of `filters` filters over g's input (im2col's
  /// geometry), for batches up to max_batch; nullptr (the default) when it has none or they are
  /// not chosen: Conv2d then runs im2col + sgemm. The CPU backend's: oneDNN's where
  /// cpu::kernels() is kOnednn. Called at set-up (Layer::reserve), never per iteration.
  [[nodiscard]] virtual std::unique_ptr<ConvolutionKernels> make_convolution(
      const Im2colGeometry& /*g*/, std::size_t /*filters*/, std::size_t /*max_batch*/) {
    return nullptr;
  }

  /// This backend's own kernels for a batch normalization of `channels` channels of `spatial`
  /// positions each, epsilon `eps`, for batches up to max_batch; nullptr (the default) when it has
  /// none or they are not chosen: BatchNorm then runs batch_norm_statistics / _forward /
  /// _backward. The CPU backend's: oneDNN's where cpu::kernels() is kOnednn. Called at set-up
  /// (Layer::reserve), never per iteration.
  [[nodiscard]] virtual std::unique_ptr<BatchNormKernels> make_batch_norm(std::size_t /*channels*/,
                                                                          std::size_t /*spatial*/,
                                                                          std::size_t /*max_batch*/,
                                                                          float /*eps*/) {
    return nullptr;
  }

  // ---- chunks of a layer's batch (tasks/layers/conv2d.h) ----
  /// How many bodies run_chunks may run at once at most: the scratch slots a layer gives each
  /// (slot < this). 1 here (a device's kernels queue in order on one stream); the CPU backend's
  /// is set_threads()' n.
  [[nodiscard]] virtual std::size_t chunk_slots() const noexcept { return 1; }
  /// Runs body(item, slot) once for every item < items. `slots` is the scratch the caller has
  /// (at least 1): a body may use scratch `slot` (< slots), which no other body running at the
  /// same time has. This default runs the items in order on the caller with slot 0. The CPU
  /// backend runs them over set_threads()' arena (up to slots at once), each body whole on one
  /// thread with OpenBLAS and the kernels' loops single-threaded inside, so one chunk's
  /// im2col, GEMM and scatter run beside another's instead of each kernel splitting in turn; its
  /// kernels are reentrant, so the bodies call them concurrently (all but
  /// softmax_cross_entropy). A body must give the same results wherever it runs (write only its
  /// own outputs and slot). An exception from a body propagates once the others have stopped.
  virtual void run_chunks(std::size_t items, std::size_t /*slots*/, ChunkBody body) {
    for (std::size_t item = 0; item < items; ++item) body(item, 0);
  }

  // ---- batch normalization (tasks/layers/batch_norm.h) ----
  // x, y, dx, dy: samples x channels x spatial floats (NCHW with spatial = H W; a flat input has
  // spatial 1); per-channel vectors: channels floats. M = samples x spatial.
  /// mean[c] = sum x[., c, .] / M, var[c] = sum (x - mean[c])^2 / M (biased), each summed per
  /// sample first, the samples in order.
  virtual void batch_norm_statistics(const float* x, std::size_t samples, std::size_t channels,
                                     std::size_t spatial, float* mean, float* var) = 0;
  /// inv_std[c] = 1 / sqrt(var[c] + eps); with running_mean != nullptr also the running
  /// statistics: running_mean = (1 - momentum) running_mean + momentum mean, running_var =
  /// (1 - momentum) running_var + momentum unbias var (unbias = M / (M - 1), PyTorch's).
  virtual void batch_norm_update(const float* mean, const float* var, std::size_t channels,
                                 float momentum, float unbias, float eps, float* running_mean,
                                 float* running_var, float* inv_std) = 0;
  /// y = gamma[c] (x - mean[c]) inv_std[c] + beta[c].
  virtual void batch_norm_forward(const float* x, std::size_t samples, std::size_t channels,
                                  std::size_t spatial, const float* mean, const float* inv_std,
                                  const float* gamma, const float* beta, float* y) = 0;
  /// With x_hat = (x - mean[c]) inv_std[c]: dbeta[c] = sum dy, dgamma[c] = sum dy x_hat
  /// (overwritten; summed per sample first, in order), and when dx != nullptr
  /// dx = gamma[c] inv_std[c] (dy - dbeta[c] / M - x_hat dgamma[c] / M).
  virtual void batch_norm_backward(const float* x, const float* dy, std::size_t samples,
                                   std::size_t channels, std::size_t spatial, const float* mean,
                                   const float* inv_std, const float* gamma, float* dx,
                                   float* dgamma, float* dbeta) = 0;

  // ---- loss ----
  /// Softmax cross-entropy as SoftmaxCrossEntropy::forward_backward: logits (batch x classes,
  /// device), labels (host, batch = labels.size(), each in [0, classes) else
  /// gradmesh::ContractError); writes dlogits = (softmax - onehot) / batch on the device and
  /// returns the mean loss (nats). Waits for the result.
  virtual float softmax_cross_entropy(const float* logits, std::span<const std::int32_t> labels,
                                      std::size_t classes, float* dlogits) = 0;

  // ---- gradient codecs (sync/compress/device_codec.h; issue 28 item 1) ----
  // The kernels that a compressor of a gradient held in device memory is composed of, so that
  // only the encoding crosses PCIe and the encode runs beside the backward pass. Each gives the
  // bits compress::Codec gives on the host for the same input (codec.h: round to nearest even,
  // fp16 saturated at +-65504, each operation rounded on its own), except sum_squares (a figure:
  // any order of summation). The CPU backend has none (host memory is encoded by compress::Codec
  // directly): the defaults throw DeviceError naming the backend. p: n floats; k <= n.
  /// *out = sum x[i]^2 in double (device memory, one double). Any order: not bitwise.
  virtual void sum_squares(const float* /*x*/, std::size_t /*n*/, double* /*out*/) {
    no_codec_kernels("sum_squares");
  }
  /// out[i] = H(p[i]) (binary16 or bfloat16 bits) and p[i] -= decoded H(p[i]): p becomes the
  /// compression error (the new residual). Exact (codec.h's invariant).
  virtual void encode_half(HalfFormat /*format*/, float* /*p*/, std::size_t /*n*/,
                           std::uint16_t* /*out*/) {
    no_codec_kernels("encode_half");
  }
  /// out[i] = decoded in[i], or out[i] += it when `add` (n values).
  virtual void decode_half(HalfFormat /*format*/, const std::uint16_t* /*in*/, std::size_t /*n*/,
                           float* /*out*/, bool /*add*/) {
    no_codec_kernels("decode_half");
  }
  /// Per chunk of `chunk` floats c: scales[c] = max |p| / 127, values[i] = round(p[i] / scales[c])
  /// (nearest even, in [-127, 127]; 0 for an all-zero chunk), p[i] -= values[i] scales[c].
  virtual void encode_int8(float* /*p*/, std::size_t /*n*/, std::size_t /*chunk*/,
                           float* /*scales*/, std::int8_t* /*values*/) {
    no_codec_kernels("encode_int8");
  }
  /// out[i] = values[i] scales[i / chunk], or += when `add`.
  virtual void decode_int8(const float* /*scales*/, const std::int8_t* /*values*/,
                           std::size_t /*n*/, std::size_t /*chunk*/, float* /*out*/, bool /*add*/) {
    no_codec_kernels("decode_int8");
  }
  /// Device scratch bytes top_k needs for n floats (the caller allocates them once).
  [[nodiscard]] virtual std::size_t top_k_scratch_bytes(std::size_t /*n*/) {
    no_codec_kernels("top_k_scratch_bytes");
  }
  /// indices (k, strictly ascending) of the k entries of largest |p|, ties to the lower index
  /// (Codec's total order). With a NaN among p which entries are kept may differ from the host's.
  virtual void top_k(const float* /*p*/, std::size_t /*n*/, std::size_t /*k*/,
                     std::uint32_t* /*indices*/, std::byte* /*scratch*/) {
    no_codec_kernels("top_k");
  }
  /// indices[j] = random-k's j-th index of the iteration's `stream`: j n / k plus
  /// SplitMix64(derive_seed(stream, j)).next_below((j + 1) n / k - j n / k)
  /// (compress::randomk_compressor, sync/compress/randomk/).
  virtual void random_k(std::uint64_t /*stream*/, std::size_t /*n*/, std::size_t /*k*/,
                        std::uint32_t* /*indices*/) {
    no_codec_kernels("random_k");
  }
  /// values[j] = p[indices[j]], then p[indices[j]] = 0 (k distinct indices).
  virtual void gather_and_zero(float* /*p*/, const std::uint32_t* /*indices*/, std::size_t /*k*/,
                               float* /*values*/) {
    no_codec_kernels("gather_and_zero");
  }
  /// out[indices[j]] += values[j] (k distinct indices).
  virtual void scatter_add(const std::uint32_t* /*indices*/, const float* /*values*/,
                           std::size_t /*k*/, float* /*out*/) {
    no_codec_kernels("scatter_add");
  }

 private:
  [[noreturn]] void no_codec_kernels(const char* what) const {
    throw DeviceError(
        std::string(what) + ": the " + std::string(name()) +
        " backend has no gradient-codec kernels (compress::Codec encodes host memory)");
  }
};

}  // namespace gradmesh::tasks
