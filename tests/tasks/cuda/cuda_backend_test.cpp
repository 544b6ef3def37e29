// Every CUDA kernel and every layer, forward and backward, against the CPU backend (within 1e-4
// relative, max-norm), and a CNN trained a few steps on both. Runs when a CUDA GPU is visible;
// otherwise each case prints one line saying why it is skipped, and passes.

#include "tasks/cuda/cuda_backend.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <vector>

#include "tasks/cpu/cpu_backend.h"
#include "tasks/layers/avg_pool2d.h"
#include "tasks/layers/batch_norm.h"
#include "tasks/layers/conv2d.h"
#include "tasks/layers/dense.h"
#include "tasks/layers/dropout.h"
#include "tasks/layers/flatten.h"
#include "tasks/layers/max_pool2d.h"
#include "tasks/layers/relu.h"
#include "tasks/model.h"
#include "tasks/optim/optimizer.h"
#include "tasks/random.h"

namespace gradmesh::tasks::cuda {
namespace {

constexpr double kTolerance = 1e-4;

/// The CUDA backend, or nullptr after printing why the test is skipped.
std::unique_ptr<Backend> gpu_or_skip() {
  const DeviceProbe probe = probe_devices();
  if (probe.count <= 0) {
    WARN("skipped: " << probe.reason());
    return nullptr;
  }
  return make_cuda_backend();
}

std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = 2.0f * rng.next_float() - 1.0f;
  return v;
}

/// max |a - b| <= 1e-4 max(max |b|, 1e-6): relative in the max norm.
void check_close(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  REQUIRE(a.size() == b.size());
  double diff = 0.0, scale = 1e-6;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  INFO(what << ": max abs difference " << diff << ", max abs CPU value " << scale);
  CHECK(diff <= kTolerance * scale);
}

/// check_close of all parameters of a device model and a CPU model (parameters() downloads).
void check_parameters_close(Model& dev, Model& cpu, const char* what) {
  const auto p_cpu = cpu.parameters(), p_dev = dev.parameters();
  check_close(std::vector<float>(p_dev.begin(), p_dev.end()),
              std::vector<float>(p_cpu.begin(), p_cpu.end()), what);
}

/// Device copies of host vectors, and back.
struct Device {
  Backend& be;
  Buffer<float> upload(const std::vector<float>& v) {
    Buffer<float> b = be.allocate<float>(v.size());
    be.copy_to_device(b.data(), v.data(), v.size() * sizeof(float));
    return b;
  }
  std::vector<float> download(const Buffer<float>& b) {
    std::vector<float> v(b.size());
    be.copy_to_host(v.data(), b.data(), v.size() * sizeof(float));
    return v;
  }
};

/// Runs `layer_cpu` and `layer_gpu` (same kind and shape; the GPU one set to `gpu` before this)
/// forward and backward on the same data and compares y, dx and the parameter gradients.
void compare_layer(Layer& layer_cpu, Layer& layer_gpu, Backend& gpu, std::size_t batch,
                   std::uint64_t seed) {
  Device dev{gpu};
  const std::size_t np = layer_cpu.parameter_count();
  std::vector<float> params(np), grads(np, 0.0f);
  Buffer<float> d_params = gpu.allocate<float>(np), d_grads = gpu.allocate<float>(np);
  layer_cpu.bind(params, grads);
  layer_gpu.bind(params, grads);  // initialize on the host ...
  layer_cpu.reserve(batch);
  layer_gpu.reserve(batch);
  layer_cpu.initialize(seed);
  layer_gpu.initialize(seed);
  if (np > 0) {  // ... then compute on the device copy
    const std::vector<float> bias = random_floats(np, seed + 1);
    for (std::size_t i = 0; i < np; ++i) params[i] += 0.1f * bias[i];  // non-zero biases
    gpu.copy_to_device(d_params.data(), params.data(), np * sizeof(float));
    layer_gpu.bind(d_params.span(), d_grads.span());
  }
  const std::vector<float> x = random_floats(batch * layer_cpu.input_size(), seed + 2);
  const std::vector<float> dy = random_floats(batch * layer_cpu.output_size(), seed + 3);
  std::vector<float> y(batch * layer_cpu.output_size()), dx(x.size());
  layer_cpu.forward(x.data(), y.data(), batch);
  layer_cpu.backward(x.data(), y.data(), dy.data(), dx.data(), batch);

  Buffer<float> d_x = dev.upload(x), d_dy = dev.upload(dy);
  Buffer<float> d_y = gpu.allocate<float>(y.size()), d_dx = gpu.allocate<float>(dx.size());
  layer_gpu.forward(d_x.data(), d_y.data(), batch);
  layer_gpu.backward(d_x.data(), d_y.data(), d_dy.data(), d_dx.data(), batch);
  INFO(layer_cpu.kind());
  check_close(dev.download(d_y), y, "forward y");
  check_close(dev.download(d_dx), dx, "backward dx");
  if (np > 0) check_close(dev.download(d_grads), grads, "parameter gradients");
}

}  // namespace

TEST_CASE("CUDA sgemm equals the CPU's for every transpose and strided operands", "[tasks][cuda]") {
  const auto gpu = gpu_or_skip();
  if (!gpu) return;
  cpu::CpuBackend cpu;
  Device dev{*gpu};
  const std::size_t m = 37, n = 29, k = 53;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      const std::size_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 5;
      const std::vector<float> a = random_floats((ta ? k : m) * lda, 1);
      const std::vector<float> b = random_floats((tb ? n : k) * ldb, 2);
      std::vector<float> c = random_floats(m * ldc, 3);
      Buffer<float> da = dev.upload(a), db = dev.upload(b), dc = dev.upload(c);
      cpu.sgemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, c.data(), ldc);
      gpu->sgemm(ta, tb, m, n, k, 0.5f, da.data(), lda, db.data(), ldb, 0.25f, dc.data(), ldc);
      INFO("trans_a " << ta << " trans_b " << tb);
      check_close(dev.download(dc), c, "sgemm");
    }
  }
}

TEST_CASE("CUDA element-wise, im2col/col2im, pooling and loss kernels equal the CPU's",
          "[tasks][cuda]") {
  const auto gpu = gpu_or_skip();
  if (!gpu) return;
  cpu::CpuBackend cpu;
  Device dev{*gpu};
  const std::vector<float> a = random_floats(1000, 4), b = random_floats(1000, 5);
  Buffer<float> da = dev.upload(a), db = dev.upload(b);
  {
    std::vector<float> y(1000);
    Buffer<float> dy = gpu->allocate<float>(1000);
    cpu.multiply(a.data(), b.data(), 1000, y.data());
    gpu->multiply(da.data(), db.data(), 1000, dy.data());
    check_close(dev.download(dy), y, "multiply");
    cpu.relu_forward(a.data(), 1000, y.data());
    gpu->relu_forward(da.data(), 1000, dy.data());
    check_close(dev.download(dy), y, "relu_forward");
    cpu.relu_backward(a.data(), b.data(), 1000, y.data());
    gpu->relu_backward(da.data(), db.data(), 1000, dy.data());
    check_close(dev.download(dy), y, "relu_backward");
    cpu.broadcast_rows(a.data(), 40, 25, y.data());
    gpu->broadcast_rows(da.data(), 40, 25, dy.data());
    check_close(dev.download(dy), y, "broadcast_rows");
    std::vector<float> sums(25);
    Buffer<float> dsums = gpu->allocate<float>(25);
    cpu.column_sums(a.data(), 40, 25, sums.data());
    gpu->column_sums(da.data(), 40, 25, dsums.data());
    check_close(dev.download(dsums), sums, "column_sums");
    gpu->fill(dy.data(), 1000, 2.5f);
    check_close(dev.download(dy), std::vector<float>(1000, 2.5f), "fill");
    std::vector<float> mask(1000);
    Buffer<float> dmask = gpu->allocate<float>(1000);
    cpu.dropout_forward(a.data(), 1000, 99, 0.3f, 1.0f / 0.7f, mask.data(), y.data());
    gpu->dropout_forward(da.data(), 1000, 99, 0.3f, 1.0f / 0.7f, dmask.data(), dy.data());
    CHECK(dev.download(dmask) == mask);  // the same SplitMix64 stream, bit for bit
    check_close(dev.download(dy), y, "dropout_forward");
  }
  // im2col / col2im on a padded, strided geometry, 3 samples, a wider row stride.
  for (const std::size_t stride : {std::size_t{1}, std::size_t{2}}) {
    const Im2colGeometry g{
        3, 9, 7, 3, stride, 1, (9 + 2 - 3) / stride + 1, (7 + 2 - 3) / stride + 1};
    const std::size_t samples = 3, ld = samples * g.positions() + 4;
    const std::vector<float> x = random_floats(samples * g.sample_size(), 6);
    std::vector<float> col(g.patch() * ld, 0.0f), dx(x.size());
    Buffer<float> dxin = dev.upload(x), dcol = dev.upload(col);
    cpu.im2col(x.data(), samples, g, col.data(), ld);
    gpu->im2col(dxin.data(), samples, g, dcol.data(), ld);
    check_close(dev.download(dcol), col, "im2col");
    const std::vector<float> d = random_floats(col.size(), 7);
    Buffer<float> dd = dev.upload(d), ddx = gpu->allocate<float>(x.size());
    cpu.col2im(d.data(), ld, samples, g, dx.data());
    gpu->col2im(dd.data(), ld, samples, g, ddx.data());
    check_close(dev.download(ddx), dx, "col2im");
    // pack / unpack with bias sums
    const std::size_t filters = 4, positions = 10;
    const std::vector<float> dy = random_floats(samples * filters * positions, 8);
    const std::vector<float> bias = random_floats(filters, 9);
    std::vector<float> packed(filters * (samples * positions + 2), 0.0f), sums = bias;
    std::vector<float> y(dy.size());
    Buffer<float> ddy = dev.upload(dy), dpacked = dev.upload(packed), dsums = dev.upload(sums);
    Buffer<float> dbias = dev.upload(bias), dyy = gpu->allocate<float>(y.size());
    cpu.pack_channels(dy.data(), samples, filters, positions, packed.data(),
                      samples * positions + 2, sums.data());
    gpu->pack_channels(ddy.data(), samples, filters, positions, dpacked.data(),
                       samples * positions + 2, dsums.data());
    check_close(dev.download(dpacked), packed, "pack_channels");
    check_close(dev.download(dsums), sums, "pack_channels bias sums");
    cpu.unpack_channels_add_bias(packed.data(), samples * positions + 2, samples, filters,
                                 positions, bias.data(), y.data());
    gpu->unpack_channels_add_bias(dpacked.data(), samples * positions + 2, samples, filters,
                                  positions, dbias.data(), dyy.data());
    check_close(dev.download(dyy), y, "unpack_channels_add_bias");
  }
  // max pooling, overlapping windows (3, stride 2), 4 planes of 9 x 8
  {
    const PoolGeometry g{9, 8, 3, 2, 4, 3};
    const std::vector<float> x = random_floats(4 * 72, 10);
    const std::vector<float> dy = random_floats(4 * 12, 11);
    std::vector<float> y(48), dx(4 * 72);
    std::vector<std::uint32_t> arg(48);
    Buffer<float> dxin = dev.upload(x), ddy = dev.upload(dy);
    Buffer<float> dyy = gpu->allocate<float>(48), ddx = gpu->allocate<float>(4 * 72);
    Buffer<std::uint32_t> darg = gpu->allocate<std::uint32_t>(48);
    cpu.max_pool_forward(x.data(), 4, g, y.data(), arg.data());
    gpu->max_pool_forward(dxin.data(), 4, g, dyy.data(), darg.data());
    check_close(dev.download(dyy), y, "max_pool_forward");
    std::vector<std::uint32_t> garg(48);
    gpu->copy_to_host(garg.data(), darg.data(), 48 * sizeof(std::uint32_t));
    CHECK(garg == arg);
    cpu.max_pool_backward(dy.data(), arg.data(), 4, g, dx.data());
    gpu->max_pool_backward(ddy.data(), darg.data(), 4, g, ddx.data());
    check_close(dev.download(ddx), dx, "max_pool_backward");
    cpu.avg_pool_forward(x.data(), 4, g, y.data());
    gpu->avg_pool_forward(dxin.data(), 4, g, dyy.data());
    check_close(dev.download(dyy), y, "avg_pool_forward");
    cpu.avg_pool_backward(dy.data(), 4, g, dx.data());
    gpu->avg_pool_backward(ddy.data(), 4, g, ddx.data());
    check_close(dev.download(ddx), dx, "avg_pool_backward");
  }
  // softmax cross-entropy
  {
    const std::vector<float> logits = random_floats(7 * 10, 12);
    const std::vector<std::int32_t> labels = {0, 3, 9, 9, 1, 5, 2};
    std::vector<float> d(70);
    Buffer<float> dl = dev.upload(logits), dd = gpu->allocate<float>(70);
    const float loss_cpu = cpu.softmax_cross_entropy(logits.data(), labels, 10, d.data());
    const float loss_gpu = gpu->softmax_cross_entropy(dl.data(), labels, 10, dd.data());
    CHECK(loss_gpu == Approx(loss_cpu).epsilon(kTolerance));
    check_close(dev.download(dd), d, "softmax_cross_entropy dlogits");
    const std::vector<std::int32_t> bad = {10};
    CHECK_THROWS_AS(gpu->softmax_cross_entropy(dl.data(), bad, 10, dd.data()), ContractError);
  }
}

TEST_CASE("Every layer's forward and backward on CUDA equals the CPU's", "[tasks][cuda]") {
  const auto gpu = gpu_or_skip();
  if (!gpu) return;
  const Shape image{3, 11, 10};
  {
    Dense c(image, 17), g(image, 17);
    g.set_backend(*gpu);
    compare_layer(c, g, *gpu, 6, 1);
  }
  for (const Conv2dGeometry geo : {Conv2dGeometry{8, 3, 1, 1}, Conv2dGeometry{5, 4, 2, 0}}) {
    // A small column budget, so a batch spans several GEMM chunks.
    Conv2d c(image, geo, 600), g(image, geo, 600);
    g.set_backend(*gpu);
    compare_layer(c, g, *gpu, 5, 2);
  }
  {
    Relu c(image), g(image);
    g.set_backend(*gpu);
    compare_layer(c, g, *gpu, 4, 3);
  }
  {
    MaxPool2d c(image, 3, 2), g(image, 3, 2);
    g.set_backend(*gpu);
    compare_layer(c, g, *gpu, 4, 4);
  }
  {
    AvgPool2d c(image, 3, 2), g(image, 3, 2);
    g.set_backend(*gpu);
    compare_layer(c, g, *gpu, 4, 7);
  }
  {
    GlobalAvgPool c(image), g(image);
    g.set_backend(*gpu);
    compare_layer(c, g, *gpu, 4, 8);
  }
  for (const Shape shape : {image, Shape::flat(13)}) {  // 2-d and 1-d
    BatchNorm c(shape), g(shape);
    g.set_backend(*gpu);
    compare_layer(c, g, *gpu, 5, 9);
  }
  {
    Flatten c(image), g(image);
    g.set_backend(*gpu);
    compare_layer(c, g, *gpu, 4, 5);
  }
  {
    Dropout c(image, 0.4), g(image, 0.4);
    g.set_backend(*gpu);
    compare_layer(c, g, *gpu, 4, 6);
  }
}

TEST_CASE("A CNN trained on CUDA stays within 1e-4 of the same CNN on the CPU", "[tasks][cuda]") {
  auto gpu = gpu_or_skip();
  if (!gpu) return;
  const auto specs = parse_layer_specs({"conv2d:8:5:1:2", "relu", "max_pool2d:2", "conv2d:16:5:1:2",
                                        "relu", "max_pool2d:2", "flatten", "dropout:0.2",
                                        "dense:64", "relu", "dense:10", "softmax_cross_entropy"});
  const Shape shape{1, 28, 28};
  constexpr std::size_t kBatch = 16;
  Model cpu(specs, shape, kBatch, 5);
  Model dev(specs, shape, kBatch, 5, std::move(gpu));
  REQUIRE(dev.on_device());
  SplitMix64 rng(8);
  std::vector<float> x(kBatch * shape.size());
  std::vector<std::int32_t> y(kBatch);
  for (int step = 0; step < 5; ++step) {
    for (float& v : x) v = rng.next_float();
    for (auto& v : y) v = static_cast<std::int32_t>(rng.next_below(10));
    const float loss_cpu = cpu.forward_backward(x, y);
    const float loss_dev = dev.forward_backward(x, y);
    CHECK(loss_dev == Approx(loss_cpu).epsilon(kTolerance));
    const auto g_cpu = cpu.gradients(), g_dev = dev.gradients();
    check_close(std::vector<float>(g_dev.begin(), g_dev.end()),
                std::vector<float>(g_cpu.begin(), g_cpu.end()), "gradients");
    // SGD on the host, each model on its own gradients.
    for (Model* m : {&cpu, &dev}) {
      const auto p = m->parameters();
      const auto g = m->gradients();
      for (std::size_t i = 0; i < p.size(); ++i) p[i] -= 0.05f * g[i];
    }
  }
  check_parameters_close(dev, cpu, "parameters after 5 steps");
}

TEST_CASE("CUDA sgd_step and scale equal the CPU's, velocity carried over three steps",
          "[tasks][cuda]") {
  const auto gpu = gpu_or_skip();
  if (!gpu) return;
  cpu::CpuBackend cpu;
  Device dev{*gpu};
  const SgdOptions o{0.05f, 0.9f, 5e-4f};
  std::vector<float> w = random_floats(4099, 21), v(w.size(), 0.0f);
  Buffer<float> dw = dev.upload(w), dv = dev.upload(v);
  for (std::uint64_t step = 0; step < 3; ++step) {
    const std::vector<float> g = random_floats(w.size(), 30 + step);
    Buffer<float> dg = dev.upload(g);
    cpu.sgd_step(w.data(), g.data(), v.data(), w.size(), o);
    gpu->sgd_step(dw.data(), dg.data(), dv.data(), w.size(), o);
    gpu->synchronize();  // before dg is freed
  }
  check_close(dev.download(dw), w, "sgd_step parameters");
  check_close(dev.download(dv), v, "sgd_step velocity");
  cpu.scale(w.data(), w.size(), 0.25f);
  gpu->scale(dw.data(), w.size(), 0.25f);
  check_close(dev.download(dw), w, "scale");
}

TEST_CASE("CUDA adam_step, copy_rows and accumulate equal the CPU's", "[tasks][cuda]") {
  const auto gpu = gpu_or_skip();
  if (!gpu) return;
  cpu::CpuBackend cpu;
  Device dev{*gpu};
  for (const bool decoupled : {false, true}) {
    const AdamOptions o{0.9f, 0.999f, 1e-8f, decoupled};
    std::vector<float> w = random_floats(4099, 41), m(w.size(), 0.0f), v(w.size(), 0.0f);
    Buffer<float> dw = dev.upload(w), dm = dev.upload(m), dv = dev.upload(v);
    for (std::uint64_t t = 1; t <= 3; ++t) {
      const std::vector<float> g = random_floats(w.size(), 50 + t);
      Buffer<float> dg = dev.upload(g);
      const AdamStep step = adam_step_scalars(o, t, 0.01f, 0.01f);
      cpu.adam_step(w.data(), g.data(), m.data(), v.data(), w.size(), o, step);
      gpu->adam_step(dw.data(), dg.data(), dm.data(), dv.data(), w.size(), o, step);
      gpu->synchronize();  // before dg is freed
    }
    check_close(dev.download(dw), w, "adam_step parameters");
    check_close(dev.download(dm), m, "adam_step first moment");
    check_close(dev.download(dv), v, "adam_step second moment");
  }
  // Channel concatenation's strided copy, and a graph's gradient sums.
  const std::vector<float> a = random_floats(6 * 5, 61), b = random_floats(6 * 5, 62);
  std::vector<float> rows(6 * 8, 0.0f), sum = a;
  Buffer<float> da = dev.upload(a), db = dev.upload(b), drows = dev.upload(rows);
  cpu.copy_rows(rows.data() + 3, 8, a.data(), 5, 5, 6);
  gpu->copy_rows(drows.data() + 3, 8, da.data(), 5, 5, 6);
  check_close(dev.download(drows), rows, "copy_rows");
  cpu.accumulate(sum.data(), b.data(), sum.size());
  gpu->accumulate(da.data(), db.data(), sum.size());
  check_close(dev.download(da), sum, "accumulate");
}

TEST_CASE("A layer stepped on the CUDA device equals the host step, host reads download it",
          "[tasks][cuda]") {
  auto gpu = gpu_or_skip();
  if (!gpu) return;
  const auto specs = parse_layer_specs({"dense:16", "relu", "dense:4", "softmax_cross_entropy"});
  constexpr std::size_t kBatch = 8, kFeatures = 10;
  Model cpu(specs, kFeatures, kBatch, 5);
  Model dev(specs, kFeatures, kBatch, 5, std::move(gpu));
  const SgdOptions o{0.05f, 0.9f, 1e-3f};
  Optimizer cpu_optimizer(o, cpu.parameter_count()), dev_optimizer(o, dev.parameter_count());
  dev_optimizer.keep_on_device(dev.backend(), dev.parameter_offset(2),
                               dev.layer(2).parameter_count());
  SplitMix64 rng(12);
  std::vector<float> x(kBatch * kFeatures);
  std::vector<std::int32_t> y(kBatch);
  for (int step = 0; step < 3; ++step) {
    for (float& v : x) v = 2.0f * rng.next_float() - 1.0f;
    for (auto& v : y) v = static_cast<std::int32_t>(rng.next_below(4));
    cpu.forward_backward(x, y);
    dev.forward_backward(x, y);
    for (const std::size_t l : {std::size_t{0}, std::size_t{2}}) {
      cpu_optimizer.step(cpu.parameter_offset(l), cpu.layer_parameters(l), cpu.layer_gradients(l));
    }
    // Layer 0 on the host (uploaded before the next forward), layer 2 on the device.
    dev_optimizer.step(dev.parameter_offset(0), dev.layer_parameters(0), dev.layer_gradients(0));
    dev_optimizer.step_on_device(dev.parameter_offset(2), dev.device_layer_parameters(2),
                                 dev.device_layer_gradients(2));
  }
  check_parameters_close(dev, cpu, "parameters after 3 steps");
}

}  // namespace gradmesh::tasks::cuda
