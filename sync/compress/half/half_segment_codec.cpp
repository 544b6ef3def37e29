#include "sync/compress/half/half_segment_codec.h"

#include <cstdint>
#include <cstring>

#include "sync/compress/half/half_block.h"

namespace gradmesh::sync::compress {
namespace {

constexpr std::size_t kScaleBytes = sizeof(float);

/// fp16 or bf16 with a scale per segment (half_block_scale).
class HalfSegmentCodec final : public collective::SegmentCodec {
 public:
  explicit HalfSegmentCodec(tasks::HalfFormat format) : format_(format) {}
  [[nodiscard]] std::string_view name() const noexcept override {
    return format_ == tasks::HalfFormat::kFp16 ? "fp16" : "bf16";
  }
  [[nodiscard]] std::size_t encoded_bytes(std::size_t floats) const noexcept override {
    return kScaleBytes + floats * sizeof(std::uint16_t);
  }
  void encode(std::span<const float> values, std::byte* out,
              std::span<float> decoded) const override {
    const float scale = half_block_scale(format_, values);
    std::memcpy(out, &scale, kScaleBytes);
    encode_half_block(format_, scale, values, out + kScaleBytes);
    if (!decoded.empty()) decode_half_block(format_, scale, out + kScaleBytes, decoded);
  }
  void decode(const std::byte* in, std::span<float> out) const override {
    decode_half_block(format_, scale_of(in), in + kScaleBytes, out);
  }
  void decode_add(const std::byte* in, std::span<float> sum) const override {
    decode_add_half_block(format_, scale_of(in), in + kScaleBytes, sum);
  }

 private:
  static float scale_of(const std::byte* in) noexcept {
    float scale = 0;
    std::memcpy(&scale, in, kScaleBytes);
    return scale;
  }
  tasks::HalfFormat format_;
};

}  // namespace

const collective::SegmentCodec& half_segment_codec(tasks::HalfFormat format) {
  static const HalfSegmentCodec fp16(tasks::HalfFormat::kFp16), bf16(tasks::HalfFormat::kBf16);
  return format == tasks::HalfFormat::kFp16 ? fp16 : bf16;
}

}  // namespace gradmesh::sync::compress
