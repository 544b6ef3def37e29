#include "sync/compress/randomk/randomk_compressor.h"

#include <algorithm>
#include <cstdint>

#include "engine/error.h"
#include "sync/compress/wire_bytes.h"
#include "tasks/backend.h"
#include "tasks/random.h"

namespace gradmesh::sync::compress {
namespace {

class RandomKCompressor final : public Compressor {
 public:
  RandomKCompressor(std::size_t floats, double ratio, std::uint64_t seed)
      : Compressor(floats), kept_(kept_entries(floats, ratio)), seed_(seed) {
    GRADMESH_CHECK(floats <= UINT32_MAX,
                   "randomk: a sparse compressor indexes at most 2^32 floats");
  }

  [[nodiscard]] std::string_view name() const noexcept override { return "randomk"; }
  [[nodiscard]] std::size_t kept() const noexcept override { return kept_; }
  [[nodiscard]] std::size_t encoded_bytes() const noexcept override { return 4 * kept_; }

  EncodeStats encode(std::span<const float> values, std::span<std::byte> out,
                     std::uint64_t iteration, float* error, double input_norm2) override {
    const float* in = values.data();
    const std::size_t n = floats();
    if (input_norm2 < 0) {  // not given: one pass of our own
      detail::Norm2 input2;
      for (std::size_t i = 0; i < n; ++i) input2.add(i, in[i]);
      input_norm2 = input2.total();
    }
    EncodeStats stats{input_norm2, input_norm2, input_norm2};
    if (error != nullptr && error != in) std::copy(in, in + n, error);
    const std::uint64_t stream = tasks::derive_seed(seed_, iteration);
    for (std::size_t j = 0; j < kept_; ++j) {
      const std::size_t i = index(stream, j);
      detail::store(out.data() + 4 * j, in[i]);
      stats.error_norm2 -= static_cast<double>(in[i]) * in[i];
      if (error != nullptr) error[i] = 0.0f;
    }
    stats.error_norm2 = std::max(stats.error_norm2, 0.0);
    return stats;
  }
  void decode(std::span<const std::byte> in, std::span<float> out,
              std::uint64_t iteration) const override {
    std::fill(out.begin(), out.end(), 0.0f);
    decode_add(in, out, iteration);
  }
  void decode_add(std::span<const std::byte> in, std::span<float> sum,
                  std::uint64_t iteration) const override {
    const std::uint64_t stream = tasks::derive_seed(seed_, iteration);
    for (std::size_t j = 0; j < kept_; ++j) {
      sum[index(stream, j)] += detail::load<float>(in.data() + 4 * j);
    }
  }
  void mask_sent(std::span<const std::byte>, std::span<float> values,
                 std::uint64_t iteration) const override {
    const std::uint64_t stream = tasks::derive_seed(seed_, iteration);
    for (std::size_t j = 0; j < kept_; ++j) values[index(stream, j)] = 0.0f;
  }

 private:
  /// The j-th index of the iteration whose stream is `stream`: one uniform draw in the j-th of
  /// k equal strata of [0, n) (the CUDA backend's random_k draws the same: tasks/backend.h).
  [[nodiscard]] std::size_t index(std::uint64_t stream, std::size_t j) const noexcept {
    const std::size_t lo = j * floats() / kept_;
    const std::size_t hi = (j + 1) * floats() / kept_;
    tasks::SplitMix64 rng(tasks::derive_seed(stream, j));
    return lo + static_cast<std::size_t>(rng.next_below(hi - lo));
  }

  std::size_t kept_;
  std::uint64_t seed_;
};

/// On a device: the backend's random_k draws the iteration's indices from the same stream as the
/// host (derive_seed(seed, iteration)), then gather_and_zero (p keeps the rest: its error); decode
/// draws them again and scatters.
class RandomKDeviceKernels final : public DeviceKernels {
 public:
  RandomKDeviceKernels(tasks::Backend& backend, std::size_t floats, double ratio,
                       std::uint64_t seed)
      : backend_(backend),
        floats_(floats),
        kept_(kept_entries(floats, ratio)),
        seed_(seed),
        indices_(backend.allocate<std::uint32_t>(kept_)) {}
  void encode(float* p, std::byte* wire, std::uint64_t iteration) override {
    backend_.random_k(tasks::derive_seed(seed_, iteration), floats_, kept_, indices_.data());
    backend_.gather_and_zero(p, indices_.data(), kept_, reinterpret_cast<float*>(wire));
  }
  void decode(const std::byte* wire, float* out, std::uint64_t iteration, bool add) override {
    if (!add) backend_.fill(out, floats_, 0.0f);
    backend_.random_k(tasks::derive_seed(seed_, iteration), floats_, kept_, indices_.data());
    backend_.scatter_add(indices_.data(), reinterpret_cast<const float*>(wire), kept_, out);
  }

 private:
  tasks::Backend& backend_;
  std::size_t floats_, kept_;
  std::uint64_t seed_;
  tasks::Buffer<std::uint32_t> indices_;
};

}  // namespace

CompressorEntry randomk_compressor() {
  CompressorEntry entry{
      "randomk",
      {.dense = false, .shared_indices = true, .exact_error = true},
      [](std::size_t floats, const CompressorParams& params) -> std::unique_ptr<Compressor> {
        check_ratio(params.ratio);
        return std::make_unique<RandomKCompressor>(floats, params.ratio, params.seed);
      },
      "the ratio n entries at indices every node draws alike (4 bytes an entry)",
      [](std::size_t floats, const CompressorParams& params) {
        return 4 * kept_entries(floats, params.ratio);
      },
      // bench/codec_step.cpp (1M floats: 1.0 steps an encode; 64k floats 1.5): p = g + e, the
      // norms, k gathers.
      // The decode, k adds, is priced with the scheme's scatter (kSparseDecodeSteps).
      {.encode_steps = 1.5, .decode_steps = 0.0},
      [](const CompressorParams& params) { return "random-k " + percent_text(params.ratio); }};
  entry.make_device = [](tasks::Backend& backend, std::size_t floats,
                         const CompressorParams& params) {
    check_ratio(params.ratio);
    return std::unique_ptr<DeviceKernels>(
        new RandomKDeviceKernels(backend, floats, params.ratio, params.seed));
  };
  return entry;
}

}  // namespace gradmesh::sync::compress
