#include "sync/compress/codec.h"

#include "engine/error.h"
#include "sync/compress/momentum_correction.h"

namespace gradmesh::sync::compress {

Codec::Codec(std::string_view method, std::size_t floats, const CompressorParams& params,
             bool error_feedback)
    : compressor_(make_compressor(method, floats, params, error_feedback)),
      feedback_(dynamic_cast<ErrorFeedback*>(compressor_.get())) {}

void Codec::correct_momentum(float momentum, std::span<float> velocity) {
  GRADMESH_CHECK(dynamic_cast<MomentumCorrection*>(compressor_.get()) == nullptr,
                 "Codec::correct_momentum: called twice");
  compressor_ = std::make_unique<MomentumCorrection>(std::move(compressor_), momentum, velocity);
}

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
