#pragma once
// The decoding shared by the compressors whose wire is one f32 scale per chunk of floats, then
// each entry's own bits (int8, sign, qsgd; compressor.h): the chunk loop, decode and decode_add,
// and the check of the last byte's unused bits.

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>

#include "engine/error.h"
#include "sync/compress/compressor.h"
#include "sync/compress/wire_bytes.h"

namespace gradmesh::sync::compress {

/// A Compressor whose encoding is ceil(n / kChunk) f32 scales, then the entries' data. Derived
/// provides `float value(const std::byte* data, std::size_t i, float factor) const noexcept`,
/// entry i decoded from the data after the scales with its chunk's factor, and may hide
/// `chunk_factor(scale)` (the scale itself by default; qsgd's step scale / s), computed once a
/// chunk. Thread safety and errors as Compressor.
template <typename Derived, std::size_t kChunk>
class ChunkScaled : public Compressor {
 public:
  void decode(std::span<const std::byte> in, std::span<float> out, std::uint64_t) const override {
    decode_into<false>(in.data(), out);
  }
  void decode_add(std::span<const std::byte> in, std::span<float> sum,
                  std::uint64_t) const override {
    decode_into<true>(in.data(), sum);
  }
  /// Chunks of `floats` floats: ceil(floats / kChunk), a scale each.
  [[nodiscard]] static constexpr std::size_t chunks_for(std::size_t floats) noexcept {
    return (floats + kChunk - 1) / kChunk;
  }
  /// The factor entries of a chunk of scale `scale` decode with.
  [[nodiscard]] float chunk_factor(float scale) const noexcept { return scale; }

 protected:
  explicit ChunkScaled(std::size_t floats) noexcept
      : Compressor(floats), chunks_(chunks_for(floats)) {}
  [[nodiscard]] std::size_t chunks() const noexcept { return chunks_; }
  /// Compressor::check, then: the entries take `bits_per_entry` bits each from the low bits of
  /// each byte up, and the last byte's unused bits must be 0 (ProtocolError otherwise).
  void check_padding(std::span<const std::byte> in, std::size_t bits_per_entry) const {
    Compressor::check(in);
    const std::size_t used = (floats() * bits_per_entry) % 8;
    if (used != 0 && (std::to_integer<unsigned>(in.back()) >> used) != 0) {
      throw ProtocolError(std::string(name()) + " encoding of " + std::to_string(floats()) +
                          " floats: the last byte's unused bits are not 0");
    }
  }

 private:
  template <bool kAdd>
  void decode_into(const std::byte* bytes, std::span<float> out) const noexcept {
    const auto& self = static_cast<const Derived&>(*this);
    const std::byte* data = bytes + 4 * chunks_;
    const std::size_t n = floats();
    for (std::size_t c = 0; c < chunks_; ++c) {
      const float factor = self.chunk_factor(detail::load<float>(bytes + 4 * c));
      const std::size_t end = std::min(n, (c + 1) * kChunk);
      for (std::size_t i = c * kChunk; i < end; ++i) {
        const float v = self.value(data, i, factor);
        if constexpr (kAdd) {
          out[i] += v;
        } else {
          out[i] = v;
        }
      }
    }
  }

  std::size_t chunks_;
};

}  // namespace gradmesh::sync::compress
