#include "sync/compress/momentum_correction.h"

#include "engine/error.h"

namespace gradmesh::sync::compress {

MomentumCorrection::MomentumCorrection(std::unique_ptr<Compressor> inner, float momentum,
                                       std::span<float> velocity)
    : CompressorDecorator(std::move(inner), "MomentumCorrection"),
      momentum_(momentum),
      velocity_(velocity) {
  GRADMESH_CHECK_EQ(velocity.size(), floats(), "MomentumCorrection: velocity size");
}

EncodeStats MomentumCorrection::encode(std::span<const float> gradient, std::span<std::byte> out,
                                       std::uint64_t iteration, float* /*error*/,
                                       double /*input_norm2*/) {
  GRADMESH_CHECK_EQ(gradient.size(), velocity_.size(), "MomentumCorrection::encode: size");
  const float m = momentum_;
  float* u = velocity_.data();
  for (std::size_t i = 0; i < velocity_.size(); ++i) u[i] = m * u[i] + gradient[i];
  const EncodeStats stats = wrapped().encode(velocity_, out, iteration, nullptr);
  wrapped().mask_sent(out, velocity_, iteration);  // DGC's momentum factor masking
  return stats;
}

}  // namespace gradmesh::sync::compress
