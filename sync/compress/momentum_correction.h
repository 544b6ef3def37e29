#pragma once
// DGC's momentum correction and momentum factor masking as a wrapper around any compressor
// (issue 56, item 1; Lin et al., "Deep Gradient Compression", ICLR'18, sec. 3.2, eq. 5 and the
// masking after it), as BytePS wraps its compressors in a momentum decorator
// (byteps/common/compressor/momentum.h). Each node accumulates its own velocity u = m u + g and
// compresses u (with error feedback inside: its residual is DGC's accumulation v); where the
// encoding sent an entry, u is zeroed, so a coordinate's momentum is not sent twice. The
// optimizer then steps the decoded mean without momentum (sync/compress/sparse_scheme.h).

#include <memory>
#include <span>

#include "sync/compress/compressor.h"

namespace gradmesh::sync::compress {

/// `inner` (usually an ErrorFeedback) fed the velocity of momentum `momentum`, kept in
/// `velocity` (inner.floats() floats, storage the caller owns and checkpoints: the optimizer's
/// velocity slice of the layer, so a job resumes with it and the warm-up iterations' momentum
/// carries over).
///
/// Thread safety: as Compressor (encode mutates the velocity; decoding is the inner
/// compressor's). Memory: none of its own. Errors: as the inner compressor's.
class MomentumCorrection final : public CompressorDecorator {
 public:
  /// Throws ContractError for a null `inner` or a velocity of another size.
  MomentumCorrection(std::unique_ptr<Compressor> inner, float momentum, std::span<float> velocity);

  /// u = m u + `gradient` (entry by entry: DGC eq. 5, the weight decay already in the gradient),
  /// then inner.encode(u) and u zeroed where the encoding sent (inner.mask_sent). Returns the
  /// inner encode's figures (its gradient is u). `error` and `input_norm2` are not used.
  EncodeStats encode(std::span<const float> gradient, std::span<std::byte> out,
                     std::uint64_t iteration, float* error, double input_norm2) override;
  using Compressor::encode;

 private:
  float momentum_;
  std::span<float> velocity_;
};

}  // namespace gradmesh::sync::compress
