#pragma once
// A gradient compressor of the user's own (gradmesh's compressor plug-ins, docs/compression.md):
// each float as a 16-bit integer against one scale for the whole buffer, max |x| / 32767, rounded
// to nearest (QSGD's deterministic cousin; Alistarh et al., NeurIPS'17, sec. 3, with s = 32767 and
// no randomness). main.cpp registers it before the pipeline is built, as a DDP user registers a
// comm hook, and job.toml names it (sync.compression.method = "int16"). gradmesh wraps it in error
// feedback, checks received bytes, prices it from its entry (its size, its passes timed at
// start-up) and offers it on the schemes its traits allow: dense, so PS's chunks and all-gather.
//
// Wire (little-endian): the f32 scale, then n int16: 4 + 2n bytes. A buffer holding a NaN or an
// infinity is sent with a NaN scale: it decodes to NaN, as uncompressed floats would arrive, and
// the node's non-finite check stops the job.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string_view>

#include "sync/compress/compressor.h"

namespace custom {

class ScaledInt16 final : public gradmesh::sync::compress::Compressor {
 public:
  /// Encoded bytes of `floats` floats: the scale and 2 bytes a float.
  static std::size_t bytes_for(std::size_t floats) { return sizeof(float) + 2 * floats; }

  explicit ScaledInt16(std::size_t floats) : Compressor(floats) {}
  [[nodiscard]] std::string_view name() const noexcept override { return "int16"; }
  [[nodiscard]] std::size_t encoded_bytes() const noexcept override { return bytes_for(floats()); }

  gradmesh::sync::compress::EncodeStats encode(std::span<const float> in, std::span<std::byte> out,
                                               std::uint64_t /*iteration*/, float* error,
                                               double input_norm2) override {
    float max = 0;
    double norm2 = 0;
    bool finite = true;
    for (const float v : in) {
      finite = finite && std::isfinite(v);
      max = std::max(max, std::fabs(v));
      norm2 += static_cast<double>(v) * v;
    }
    // A NaN scale for a non-finite buffer; at least the smallest subnormal, so no division by 0.
    const float scale = !finite ? std::numeric_limits<float>::quiet_NaN()
                        : max > 0
                            ? std::max(max / 32767.0f, std::numeric_limits<float>::denorm_min())
                            : 1.0f;
    std::memcpy(out.data(), &scale, sizeof(scale));
    double error2 = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const auto q = static_cast<std::int16_t>(finite ? std::lrint(in[i] / scale) : 0);
      std::memcpy(out.data() + sizeof(float) + 2 * i, &q, sizeof(q));
      const float e = in[i] - static_cast<float>(q) * scale;
      error2 += static_cast<double>(e) * e;
      if (error != nullptr) error[i] = e;  // error may be in itself: in[i] is read first
    }
    const double input2 = input_norm2 >= 0 ? input_norm2 : norm2;
    return {input2, input2, error2};
  }

  void decode(std::span<const std::byte> in, std::span<float> out,
              std::uint64_t /*iteration*/) const override {
    const float scale = scale_of(in);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = value(in, i) * scale;
  }
  void decode_add(std::span<const std::byte> in, std::span<float> sum,
                  std::uint64_t /*iteration*/) const override {
    const float scale = scale_of(in);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += value(in, i) * scale;
  }

 private:
  static float scale_of(std::span<const std::byte> in) {
    float scale = 0;
    std::memcpy(&scale, in.data(), sizeof(scale));
    return scale;
  }
  static float value(std::span<const std::byte> in, std::size_t i) {
    std::int16_t q = 0;
    std::memcpy(&q, in.data() + sizeof(float) + 2 * i, sizeof(q));
    return static_cast<float>(q);
  }
};

/// The registry entry: its name in configs, its traits (dense: every entry sent; exact error:
/// x - q scale is exact in float, as x and q scale are within a factor 2 or q is 0, Sterbenz),
/// its factory and size, and its passes' price before start-up measures them (optimizer steps a
/// float).
inline gradmesh::sync::compress::CompressorEntry scaled_int16_compressor() {
  gradmesh::sync::compress::CompressorEntry entry;
  entry.name = "int16";
  entry.traits = {.dense = true, .shared_indices = false, .exact_error = true, .lossless = false};
  entry.make = [](std::size_t floats, const gradmesh::sync::compress::CompressorParams&) {
    return std::make_unique<ScaledInt16>(floats);
  };
  entry.summary = "int16 against one scale a buffer (the custom pipeline's own)";
  entry.encoded_bytes = [](std::size_t floats, const gradmesh::sync::compress::CompressorParams&) {
    return ScaledInt16::bytes_for(floats);
  };
  entry.cost = {.encode_steps = 1.5, .decode_steps = 0.3};
  return entry;
}

}  // namespace custom
