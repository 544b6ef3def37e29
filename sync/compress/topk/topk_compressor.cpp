#include "sync/compress/topk/topk_compressor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "engine/error.h"
#include "sync/compress/wire_bytes.h"
#include "tasks/backend.h"

namespace gradmesh::sync::compress {
namespace {

class TopKCompressor final : public Compressor {
 public:
  TopKCompressor(std::size_t floats, double ratio)
      : Compressor(floats), kept_(kept_entries(floats, ratio)), order_(floats) {
    GRADMESH_CHECK(floats <= UINT32_MAX, "topk: a sparse compressor indexes at most 2^32 floats");
  }

  [[nodiscard]] std::string_view name() const noexcept override { return "topk"; }
  [[nodiscard]] std::size_t kept() const noexcept override { return kept_; }
  [[nodiscard]] std::size_t encoded_bytes() const noexcept override { return 8 * kept_; }

  EncodeStats encode(std::span<const float> values, std::span<std::byte> out, std::uint64_t,
                     float* error, double input_norm2) override {
    const float* in = values.data();
    const std::size_t n = floats(), k = kept_;
    if (input_norm2 < 0) {  // not given: one pass of our own
      detail::Norm2 input2;
      for (std::size_t i = 0; i < n; ++i) input2.add(i, in[i]);
      input_norm2 = input2.total();
    }
    EncodeStats stats{input_norm2, input_norm2, input_norm2};
    if (k == 0) return stats;
    std::iota(order_.begin(), order_.end(), std::uint32_t{0});
    // A total order (magnitude, then index): the same choice on every run of the same input.
    const auto larger = [in](std::uint32_t a, std::uint32_t b) {
      const float x = std::abs(in[a]), y = std::abs(in[b]);
      return x > y || (x == y && a < b);
    };
    std::nth_element(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k - 1),
                     order_.end(), larger);
    std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k));
    std::byte* bytes = out.data();
    for (std::size_t j = 0; j < k; ++j) {
      const std::uint32_t i = order_[j];
      detail::store(bytes + 4 * j, i);
      detail::store(bytes + 4 * (k + j), in[i]);
    }
    // Every entry not kept is error; the kept ones are sent exactly.
    if (error != nullptr && error != in) std::copy(in, in + n, error);
    for (std::size_t j = 0; j < k; ++j) {
      const float v = in[order_[j]];
      stats.error_norm2 -= static_cast<double>(v) * v;
    }
    if (error != nullptr) {
      for (std::size_t j = 0; j < k; ++j) error[order_[j]] = 0.0f;
    }
    stats.error_norm2 = std::max(stats.error_norm2, 0.0);
    return stats;
  }

  void check(std::span<const std::byte> in) const override {
    Compressor::check(in);
    std::uint64_t previous = 0;
    for (std::size_t j = 0; j < kept_; ++j) {
      const auto i = detail::load<std::uint32_t>(in.data() + 4 * j);
      if (i >= floats() || (j > 0 && i <= previous)) {
        throw ProtocolError("topk encoding of " + std::to_string(floats()) + " floats: index " +
                            std::to_string(i) + " at entry " + std::to_string(j) +
                            (i >= floats() ? " is out of range" : " is not ascending"));
      }
      previous = i;
    }
  }
  void decode(std::span<const std::byte> in, std::span<float> out,
              std::uint64_t iteration) const override {
    std::fill(out.begin(), out.end(), 0.0f);
    decode_add(in, out, iteration);
  }
  void decode_add(std::span<const std::byte> in, std::span<float> sum,
                  std::uint64_t) const override {
    for (std::size_t j = 0; j < kept_; ++j) {
      sum[detail::load<std::uint32_t>(in.data() + 4 * j)] +=
          detail::load<float>(in.data() + 4 * (kept_ + j));
    }
  }
  void mask_sent(std::span<const std::byte> in, std::span<float> values,
                 std::uint64_t) const override {
    for (std::size_t j = 0; j < kept_; ++j) {
      values[detail::load<std::uint32_t>(in.data() + 4 * j)] = 0.0f;
    }
  }

 private:
  std::size_t kept_;
  std::vector<std::uint32_t> order_;  // the index scratch
};

/// On a device: the backend's top_k into the wire's indices (ascending, as the host's), then
/// gather_and_zero of their values (p keeps the rest: its error); decode scatters them.
class TopKDeviceKernels final : public DeviceKernels {
 public:
  TopKDeviceKernels(tasks::Backend& backend, std::size_t floats, double ratio)
      : backend_(backend),
        floats_(floats),
        kept_(kept_entries(floats, ratio)),
        scratch_(backend.allocate<std::byte>(backend.top_k_scratch_bytes(floats))) {}
  void encode(float* p, std::byte* wire, std::uint64_t) override {
    auto* indices = reinterpret_cast<std::uint32_t*>(wire);
    backend_.top_k(p, floats_, kept_, indices, scratch_.data());
    backend_.gather_and_zero(p, indices, kept_, reinterpret_cast<float*>(wire + 4 * kept_));
  }
  void decode(const std::byte* wire, float* out, std::uint64_t, bool add) override {
    if (!add) backend_.fill(out, floats_, 0.0f);
    backend_.scatter_add(reinterpret_cast<const std::uint32_t*>(wire),
                         reinterpret_cast<const float*>(wire + 4 * kept_), kept_, out);
  }

 private:
  tasks::Backend& backend_;
  std::size_t floats_, kept_;
  tasks::Buffer<std::byte> scratch_;  // top_k's sort scratch (about 16n bytes)
};

}  // namespace

CompressorEntry topk_compressor() {
  CompressorEntry entry{
      "topk",
      {.dense = false, .shared_indices = false, .exact_error = true},
      [](std::size_t floats, const CompressorParams& params) -> std::unique_ptr<Compressor> {
        check_ratio(params.ratio);
        return std::make_unique<TopKCompressor>(floats, params.ratio);
      },
      "the ratio n entries of largest magnitude with their indices (8 bytes an entry)",
      [](std::size_t floats, const CompressorParams& params) {
        return 8 * kept_entries(floats, params.ratio);
      },
      // bench/codec_step.cpp (1M floats: 8.4 steps an encode; 64k floats, where the step runs
      // in cache, 18.5): p = g + e, the norms, nth_element over an index array, the sort of
      // the k kept. A decode of k entries is small: the scheme's passes over the layer
      // (sparse_model.h, kSparseDecodeSteps) price it.
      {.encode_steps = 10.0, .decode_steps = 0.0},
      [](const CompressorParams& params) { return "top-k " + percent_text(params.ratio); }};
  entry.make_device = [](tasks::Backend& backend, std::size_t floats,
                         const CompressorParams& params) {
    check_ratio(params.ratio);
    return std::unique_ptr<DeviceKernels>(new TopKDeviceKernels(backend, floats, params.ratio));
  };
  return entry;
}

}  // namespace gradmesh::sync::compress
