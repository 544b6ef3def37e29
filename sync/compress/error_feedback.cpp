#include "sync/compress/error_feedback.h"

#include <algorithm>

#include "engine/error.h"
#include "sync/compress/wire_bytes.h"

namespace gradmesh::sync::compress {

ErrorFeedback::ErrorFeedback(std::unique_ptr<Compressor> inner)
    : CompressorDecorator(std::move(inner), "ErrorFeedback"), residual_(floats(), 0.0f) {}

EncodeStats ErrorFeedback::encode(std::span<const float> gradient, std::span<std::byte> out,
                                  std::uint64_t iteration, float* error, double) {
  GRADMESH_CHECK_EQ(gradient.size(), floats(), "ErrorFeedback::encode: gradient size");
  // p = g + e, in the residual's buffer: the inner compressor turns it into e' = p - D(C(p)).
  // ||g||^2 and ||p||^2 in the same pass (the sparsifiers take ||p||^2 from it).
  detail::Norm2 gradient2, input2;
  for (std::size_t i = 0; i < residual_.size(); ++i) {
    const float g = gradient[i];
    const float p = residual_[i] + g;
    residual_[i] = p;
    gradient2.add(i, g);
    input2.add(i, p);
  }
  EncodeStats stats = wrapped().encode(residual_, out, iteration, residual_.data(), input2.total());
  stats.gradient_norm2 = gradient2.total();
  if (error != nullptr) std::copy(residual_.begin(), residual_.end(), error);
  return stats;
}

void ErrorFeedback::save_state(engine::StateWriter& out) { out.write_floats(residual_); }

void ErrorFeedback::load_state(engine::StateReader& in) { in.read_floats(residual_); }

}  // namespace gradmesh::sync::compress
