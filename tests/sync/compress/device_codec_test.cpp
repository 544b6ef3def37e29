// Tests for sync/compress/device_codec.h: a DeviceCodec gives compress::Codec's bytes and residual
// bit for bit, decodes as it does, refuses what Codec::check refuses without writing, and shares
// Codec's checkpoint form. Every case runs on a reference device (the emulated device of
// tests/tasks/, with the codec kernels written from their definitions in tasks/backend.h, so the
// composition is tested on any machine) and on the CUDA backend when a GPU is visible (the
// kernels of tasks/cuda/codec_kernels.cu; skipped with one line otherwise).

#include "sync/compress/device_codec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "tasks/cpu/cpu_backend.h"
#include "tasks/make_backend.h"
#include "tasks/random.h"
#include "tests/sync/compress/reference_codec_device.h"

using namespace gradmesh::sync::compress;
using gradmesh::ProtocolError;
using gradmesh::tasks::Backend;
using gradmesh::tasks::HalfFormat;

namespace {

struct Target {
  std::string name;
  std::unique_ptr<Backend> backend;
};

/// The reference device, and the CUDA backend when this build has it and a GPU is visible.
std::vector<Target> targets() {
  std::vector<Target> out;
  out.push_back({"reference device", std::make_unique<gradmesh::testing::ReferenceCodecDevice>()});
  if (!gradmesh::tasks::cuda_built()) {
    WARN("CUDA codec kernels skipped: built without the CUDA backend");
    return out;
  }
  try {
    out.push_back({"cuda", gradmesh::tasks::make_backend("cuda")});
  } catch (const gradmesh::ConfigError& e) {
    WARN("CUDA codec kernels skipped: " << e.what());
  }
  return out;
}

/// A gradient's shape (a bell with a heavy tail), with the values that test the conversions'
/// edges: beyond fp16's range, its subnormals, zeros of both signs, and ties of magnitude.
std::vector<float> gradient(std::size_t n, std::uint64_t seed) {
  gradmesh::tasks::SplitMix64 rng(seed);
  std::vector<float> out(n);
  for (float& v : out) {
    float x = rng.next_float() + rng.next_float() + rng.next_float() + rng.next_float() - 2.0f;
    if (rng.next_below(50) == 0) x *= 40.0f;
    if (rng.next_below(10) == 0) x = std::round(x * 4.0f);  // ties of magnitude
    v = x * 0.01f;
  }
  const float edges[] = {70000.0f, -1e6f, 65519.0f, 3e-8f, -6e-6f, 0.0f, -0.0f, 1e-30f};
  for (std::size_t i = 0; i < std::size(edges) && i * 97 < n; ++i) out[i * 97] = edges[i];
  return out;
}

std::vector<float> download(Backend& be, const gradmesh::tasks::Buffer<float>& b) {
  std::vector<float> v(b.size());
  be.copy_to_host(v.data(), b.data(), 4 * v.size());
  return v;
}

gradmesh::tasks::Buffer<float> upload(Backend& be, const std::vector<float>& v) {
  auto b = be.allocate<float>(v.size());
  be.copy_to_device(b.data(), v.data(), 4 * v.size());
  be.synchronize();
  return b;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

constexpr std::string_view kAll[] = {"none", "fp16", "bf16", "int8", "topk", "randomk"};

}  // namespace

TEST_CASE("A device codec sends Codec's bytes and keeps its residual, bit for bit",
          "[compress][device]") {
  for (Target& t : targets()) {
    Backend& be = *t.backend;
    for (const std::string_view kind : kAll) {
      for (const bool feedback : {true, false}) {
        // 2,600 floats: five int8 chunks and a ragged sixth; top-k and random-k keep 10%.
        const std::size_t n = 2600;
        INFO(t.name << ", " << kind << (feedback ? " with" : " without") << " error feedback");
        Codec host(kind, n, CompressorParams{.ratio = 0.1, .seed = 7}, feedback);
        DeviceCodec device(be, kind, n, CompressorParams{.ratio = 0.1, .seed = 7}, feedback);
        REQUIRE(device.encoded_bytes() == host.encoded_bytes());
        std::vector<std::byte> sent_host(host.encoded_bytes()), sent_device(sent_host.size());
        auto sum_device = upload(be, std::vector<float>(n, 0.5f));
        std::vector<float> sum_host(n, 0.5f), decoded_host(n);
        auto decoded_device = be.allocate<float>(n);
        for (std::uint64_t iteration = 0; iteration < 3; ++iteration) {
          const std::vector<float> g = gradient(n, 100 + iteration);
          const auto g_device = upload(be, g);
          const EncodeStats a = host.encode(g, sent_host, iteration);
          const EncodeStats b = device.encode(g_device.data(), sent_device, iteration);
          CHECK(std::memcmp(sent_device.data(), sent_host.data(), sent_host.size()) == 0);
          CHECK(same_bits(device.residual(),
                          std::vector<float>(host.residual().begin(), host.residual().end())));
          CHECK(b.gradient_norm2 == Approx(a.gradient_norm2).epsilon(1e-9));
          CHECK(b.input_norm2 == Approx(a.input_norm2).epsilon(1e-9));
          // The host's sparse error is ||p||^2 less the kept entries' squares: its cancellation
          // is bounded by the input's norm.
          CHECK(std::fabs(b.error_norm2 - a.error_norm2) <= 1e-9 * (a.input_norm2 + 1e-12));
          // Decode and decode_add of the same bytes, as a receiver sums its peers.
          host.decode(sent_host, decoded_host, iteration);
          device.decode(sent_host, decoded_device.data(), iteration);
          CHECK(same_bits(download(be, decoded_device), decoded_host));
          host.decode_add(sent_host, sum_host, iteration);
          device.decode_add(sent_host, sum_device.data(), iteration);
          CHECK(same_bits(download(be, sum_device), sum_host));
        }
      }
    }
  }
}

TEST_CASE("A device codec refuses malformed bytes before it writes", "[compress][device]") {
  for (Target& t : targets()) {
    Backend& be = *t.backend;
    INFO(t.name);
    DeviceCodec topk(be, "topk", 100, CompressorParams{.ratio = 0.05}, true);
    auto sum = upload(be, std::vector<float>(100, 1.0f));
    std::vector<std::byte> bytes(topk.encoded_bytes());
    const std::uint32_t descending[] = {9, 3, 4, 5, 6};  // not ascending
    std::memcpy(bytes.data(), descending, sizeof(descending));
    CHECK_THROWS_AS(topk.decode_add(bytes, sum.data(), 0), ProtocolError);
    bytes.pop_back();
    CHECK_THROWS_AS(topk.decode(bytes, sum.data(), 0), ProtocolError);
    CHECK(same_bits(download(be, sum), std::vector<float>(100, 1.0f)));
  }
}

TEST_CASE("A device codec's residual checkpoints in Codec's form, both ways",
          "[compress][device]") {
  for (Target& t : targets()) {
    Backend& be = *t.backend;
    INFO(t.name);
    const std::size_t n = 1500;
    DeviceCodec device(be, "int8", n, CompressorParams{}, true);
    Codec host("int8", n, CompressorParams{}, true);
    std::vector<std::byte> out(device.encoded_bytes());
    const auto g = upload(be, gradient(n, 5));
    device.encode(g.data(), out, 0);
    gradmesh::engine::StateWriter saved;
    device.save_state(saved);
    gradmesh::engine::StateReader reader(saved.bytes(), "device codec");
    host.load_state(reader);
    CHECK(same_bits(device.residual(),
                    std::vector<float>(host.residual().begin(), host.residual().end())));
    host.encode(gradient(n, 6), out, 1);
    gradmesh::engine::StateWriter back;
    host.save_state(back);
    gradmesh::engine::StateReader reader_back(back.bytes(), "host codec");
    device.load_state(reader_back);
    CHECK(same_bits(device.residual(),
                    std::vector<float>(host.residual().begin(), host.residual().end())));
  }
}

TEST_CASE("The CPU backend has no codec kernels and says so", "[compress][device]") {
  gradmesh::tasks::cpu::CpuBackend cpu;
  DeviceCodec codec(cpu, "fp16", 8, CompressorParams{}, true);
  std::vector<float> g(8, 1.0f);
  std::vector<std::byte> out(codec.encoded_bytes());
  CHECK_THROWS_WITH(codec.encode(g.data(), out, 0),
                    Catch::Contains("the cpu backend has no gradient-codec kernels"));
  CHECK_THROWS_AS(
      [&] { DeviceCodec sparse(cpu, "topk", 8, CompressorParams{.ratio = 0.5}, true); }(),
      gradmesh::tasks::DeviceError);
}
