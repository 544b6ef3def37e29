#include "sync/compress/codec.h"

#include <string>

#include "engine/error.h"

namespace gradmesh::sync::compress {

namespace {

constexpr std::string_view kNames[] = {"none", "fp16", "bf16", "int8", "topk", "randomk"};

}  // namespace

std::string_view codec_name(CodecKind kind) noexcept {
  return kNames[static_cast<std::size_t>(kind)];
}

CodecKind parse_codec_kind(std::string_view name, std::string_view key) {
  for (std::size_t i = 0; i < std::size(kNames); ++i) {
    if (kNames[i] == name) return static_cast<CodecKind>(i);
  }
  std::string known;
  for (const std::string_view n : kNames) known += (known.empty() ? "" : ", ") + std::string(n);
  throw ConfigError(std::string(key) + ": unknown compressor \"" + std::string(name) +
                    "\" (known: " + known + ")");
}

tasks::HalfFormat half_format(CodecKind kind) {
  GRADMESH_CHECK(kind == CodecKind::kFp16 || kind == CodecKind::kBf16,
                 "half_format: " + std::string(codec_name(kind)) + " is not a 16-bit format");
  return kind == CodecKind::kFp16 ? tasks::HalfFormat::kFp16 : tasks::HalfFormat::kBf16;
}

namespace {

/// The compressor of `kind` (checking the ratio for every kind, as configs state it once).
std::unique_ptr<Compressor> codec_compressor(CodecKind kind, std::size_t floats, double ratio,
                                             bool error_feedback, std::uint64_t seed) {
  check_ratio(ratio);
  return make_compressor(codec_name(kind), floats, CompressorParams{.ratio = ratio, .seed = seed},
                         error_feedback);
}

}  // namespace

Codec::Codec(CodecKind kind, std::size_t floats, double ratio, bool error_feedback,
             std::uint64_t seed)
    : compressor_(codec_compressor(kind, floats, ratio, error_feedback, seed)),
      feedback_(dynamic_cast<ErrorFeedback*>(compressor_.get())) {}

Codec::Codec(std::string_view method, std::size_t floats, const CompressorParams& params,
             bool error_feedback)
    : compressor_(make_compressor(method, floats, params, error_feedback)),
      feedback_(dynamic_cast<ErrorFeedback*>(compressor_.get())) {}

EncodeStats Codec::encode(std::span<const float> gradient, std::span<std::byte> out,
                          std::uint64_t iteration) {
  GRADMESH_CHECK_EQ(gradient.size(), floats(), "Codec::encode: gradient size");
  GRADMESH_CHECK_EQ(out.size(), encoded_bytes(), "Codec::encode: output size");
  return compressor_->encode(gradient, out, iteration, nullptr);
}

void Codec::decode(std::span<const std::byte> in, std::span<float> out,
                   std::uint64_t iteration) const {
  GRADMESH_CHECK_EQ(out.size(), floats(), "Codec::decode: output size");
  check(in);  // before anything is written: a malformed message changes nothing
  compressor_->decode(in, out, iteration);
}

void Codec::decode_add(std::span<const std::byte> in, std::span<float> sum,
                       std::uint64_t iteration) const {
  GRADMESH_CHECK_EQ(sum.size(), floats(), "Codec::decode: output size");
  check(in);
  compressor_->decode_add(in, sum, iteration);
}

void Codec::mask_sent(std::span<const std::byte> in, std::span<float> values,
                      std::uint64_t iteration) const {
  GRADMESH_CHECK_EQ(values.size(), floats(), "Codec::mask_sent: size");
  check(in);
  compressor_->mask_sent(in, values, iteration);
}

std::span<const float> Codec::residual() const noexcept {
  return feedback_ != nullptr ? feedback_->residual() : std::span<const float>{};
}

void Codec::save_state(engine::StateWriter& out) {
  if (feedback_ != nullptr) {
    feedback_->save_state(out);
  } else {
    out.write_floats(std::span<const float>{});
  }
}

void Codec::load_state(engine::StateReader& in) {
  if (feedback_ != nullptr) {
    feedback_->load_state(in);
  } else {
    in.read_floats(std::span<float>{});
  }
}

}  // namespace gradmesh::sync::compress
