#include "sync/compress/half_segment_codec.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "engine/error.h"

namespace gradmesh::sync::compress {
namespace {

constexpr std::size_t kScaleBytes = sizeof(float);

/// fp16 or bf16 with a scale per segment (half_block_scale).
class HalfSegmentCodec final : public collective::SegmentCodec {
 public:
  explicit HalfSegmentCodec(CodecKind kind) : kind_(kind) {}
  [[nodiscard]] std::string_view name() const noexcept override { return codec_name(kind_); }
  [[nodiscard]] std::size_t encoded_bytes(std::size_t floats) const noexcept override {
    return kScaleBytes + floats * sizeof(std::uint16_t);
  }
  void encode(std::span<const float> values, std::byte* out,
              std::span<float> decoded) const override {
    const float scale = half_block_scale(kind_, values);
    std::memcpy(out, &scale, kScaleBytes);
    encode_half_block(kind_, scale, values, out + kScaleBytes);
    if (!decoded.empty()) decode_half_block(kind_, scale, out + kScaleBytes, decoded);
  }
  void decode(const std::byte* in, std::span<float> out) const override {
    decode_half_block(kind_, scale_of(in), in + kScaleBytes, out);
  }
  void decode_add(const std::byte* in, std::span<float> sum) const override {
    decode_add_half_block(kind_, scale_of(in), in + kScaleBytes, sum);
  }

 private:
  static float scale_of(const std::byte* in) noexcept {
    float scale = 0;
    std::memcpy(&scale, in, kScaleBytes);
    return scale;
  }
  CodecKind kind_;
};

}  // namespace

const collective::SegmentCodec* half_segment_codec(CodecKind kind) {
  static const HalfSegmentCodec fp16(CodecKind::kFp16), bf16(CodecKind::kBf16);
  switch (kind) {
    case CodecKind::kNone:
      return nullptr;
    case CodecKind::kFp16:
      return &fp16;
    case CodecKind::kBf16:
      return &bf16;
    default:
      throw ContractError("a ring all-reduce sends floats, fp16 or bf16, not " +
                          std::string(codec_name(kind)));
  }
}

}  // namespace gradmesh::sync::compress
