#include "sync/compress/qsgd/qsgd_compressor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "engine/error.h"
#include "sync/compress/chunk_scaled.h"
#include "sync/compress/wire_bytes.h"
#include "tasks/random.h"

namespace gradmesh::sync::compress {
namespace {

class QsgdCompressor final : public ChunkScaled<QsgdCompressor, kQsgdChunkFloats> {
 public:
  QsgdCompressor(std::size_t floats, unsigned bits, std::uint64_t seed, std::uint64_t rank)
      : ChunkScaled(floats),
        bits_(bits),
        levels_((1u << (bits - 1)) - 1),
        stream_(tasks::derive_seed(seed, rank)) {}

  [[nodiscard]] std::string_view name() const noexcept override { return "qsgd"; }
  [[nodiscard]] std::size_t encoded_bytes() const noexcept override {
    return 4 * chunks() + code_bytes();
  }

  EncodeStats encode(std::span<const float> in, std::span<std::byte> out, std::uint64_t iteration,
                     float* error, double) override {
    const std::size_t n = floats();
    std::byte* codes = out.data() + 4 * chunks();
    std::fill(codes, codes + code_bytes(), std::byte{0});
    const std::uint64_t stream = tasks::derive_seed(stream_, iteration);
    const auto s = static_cast<float>(levels_);
    detail::Norm2 input2, error2;
    for (std::size_t c = 0; c < chunks(); ++c) {
      const std::size_t begin = c * kQsgdChunkFloats;
      const std::size_t end = std::min(n, begin + kQsgdChunkFloats);
      float scale = 0;
      for (std::size_t i = begin; i < end; ++i) {
        const float magnitude = std::fabs(in[i]);
        if (!std::isfinite(magnitude)) {
          scale = std::numeric_limits<float>::quiet_NaN();
          break;
        }
        scale = std::max(scale, magnitude);
      }
      detail::store(out.data() + 4 * c, scale);
      const float step = scale / s;
      const float inverse = s / scale;  // NaN for a NaN scale; infinite for 0 (0 inf: NaN)
      // Two uniform draws of 24 bits from each 64-bit draw, one for every entry whatever its
      // value, so entry i's draw depends on (seed, rank, iteration, i) alone.
      tasks::SplitMix64 rng(tasks::derive_seed(stream, c));
      std::uint64_t draw = 0;
      for (std::size_t i = begin; i < end; ++i) {
        const bool first = (i - begin) % 2 == 0;
        if (first) draw = rng.next();
        const float u = static_cast<float>((draw >> (first ? 40 : 8)) & 0xff'ffffu) * 0x1p-24f;
        const float v = in[i];
        // In [0, s]; at most s where a subnormal scale's inverse overflowed; NaN stays NaN.
        const float x = std::min(std::fabs(v) * inverse, s);
        unsigned level = 0;
        if (x > 0) {  // false for NaN
          const auto whole = static_cast<unsigned>(x);
          level = std::min(whole + (u < x - static_cast<float>(whole) ? 1u : 0u), levels_);
        }
        const bool negative = std::signbit(v) && level != 0;
        put_code(codes, i, (static_cast<unsigned>(negative) << (bits_ - 1)) | level);
        const float sent = detail::negate_if(negative, static_cast<float>(level) * step);
        const float e = v - sent;
        input2.add(i, v);
        error2.add(i, e);
        if (error != nullptr) error[i] = e;
      }
    }
    return {input2.total(), input2.total(), error2.total()};
  }

  void check(std::span<const std::byte> in) const override { check_padding(in, bits_); }
  /// A chunk's step, scale / s.
  [[nodiscard]] float chunk_factor(float scale) const noexcept {
    return scale / static_cast<float>(levels_);
  }
  /// Entry i: its sign and level times the chunk's step.
  [[nodiscard]] float value(const std::byte* codes, std::size_t i, float step) const noexcept {
    const unsigned code = code_at(codes, i);
    const bool negative = (code >> (bits_ - 1)) != 0;
    return detail::negate_if(negative, static_cast<float>(code & levels_) * step);
  }

 private:
  [[nodiscard]] std::size_t code_bytes() const noexcept { return (floats() * bits_ + 7) / 8; }
  void put_code(std::byte* codes, std::size_t i, unsigned code) const noexcept {
    const std::size_t bit = i * bits_;
    codes[bit / 8] |= static_cast<std::byte>(code << (bit % 8));
  }
  [[nodiscard]] unsigned code_at(const std::byte* codes, std::size_t i) const noexcept {
    const std::size_t bit = i * bits_;
    return (std::to_integer<unsigned>(codes[bit / 8]) >> (bit % 8)) & ((1u << bits_) - 1u);
  }

  unsigned bits_;
  unsigned levels_;       // s
  std::uint64_t stream_;  // derive_seed(seed, rank)
};

}  // namespace

CompressorEntry qsgd_compressor() {
  return {"qsgd",
          {.dense = true, .shared_indices = false, .exact_error = false},
          [](std::size_t floats, const CompressorParams& params) -> std::unique_ptr<Compressor> {
            if (params.bits != 2 && params.bits != 4 && params.bits != 8) {
              throw ConfigError("sync.compression.bits = " + std::to_string(params.bits) +
                                ": qsgd sends 2, 4 or 8 bits a float");
            }
            return std::make_unique<QsgdCompressor>(floats, static_cast<unsigned>(params.bits),
                                                    params.seed, params.rank);
          },
          "stochastic rounding to 2, 4 or 8 bits, unbiased, a scale per 512 floats",
          [](std::size_t floats, const CompressorParams& params) {
            return 4 * QsgdCompressor::chunks_for(floats) +
                   (floats * static_cast<std::size_t>(params.bits) + 7) / 8;
          },
          // bench_codec_step (1M floats, 4 nodes, 4 bits), 2 runs on 2026-12-07 (AMD EPYC): 13-20
          // steps an encode (the max pass, a draw and a rounding a float), 1.7-2.7 a decode.
          {.encode_steps = 16.0, .decode_steps = 2.2},
          [](const CompressorParams& params) {
            return "qsgd " + std::to_string(params.bits) + "-bit";
          }};
}

}  // namespace gradmesh::sync::compress
