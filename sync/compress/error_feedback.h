#pragma once
// Error feedback as a wrapper around any compressor (issue 56, item 1): the compressor encodes
// p = g + e, and the wrapper keeps e' = p - D(C(p)) for the next encode, so over any run the
// floats sent plus the residual sum to the gradients given.
//
// Sources: Seide et al., "1-Bit Stochastic Gradient Descent" (Interspeech'14); Karimireddy et al.,
// "Error Feedback Fixes SignSGD" (ICML'19, Alg. 2: p = g + e, delta = C(p), e = p - delta);
// BytePS's ErrorFeedback decorator (byteps/common/compressor/error_feedback.h).

#include <algorithm>
#include <memory>
#include <vector>

#include "engine/checkpoint.h"
#include "sync/compress/compressor.h"

namespace gradmesh::sync::compress {

/// `inner` with a residual of inner.floats() floats (zero at first).
///
/// Invariant: after each encode, D(C(p)) + e' == p element by element; bit for bit where the
/// inner compressor's traits().exact_error holds (the inner compressor writes e' in its encoding
/// pass, in place over p). Memory: the residual (4n bytes). Thread safety: as Compressor (encode
/// and the residual's save/load mutate; decoding is the inner compressor's, const).
class ErrorFeedback final : public CompressorDecorator, public engine::Checkpointable {
 public:
  /// Throws ContractError for a null `inner`.
  explicit ErrorFeedback(std::unique_ptr<Compressor> inner);

  /// Encodes p = `gradient` + residual and keeps p - D(C(p)) as the residual (written to `error`
  /// too when it is not null). Returns ||g||^2, ||p||^2 and ||p - D(C(p))||^2.
  /// (`input_norm2`, ||g||^2, is not used: the wrapper sums ||g||^2 and ||p||^2 as it forms p.)
  EncodeStats encode(std::span<const float> gradient, std::span<std::byte> out,
                     std::uint64_t iteration, float* error, double input_norm2) override;
  using Compressor::encode;

  /// The residual e (floats() floats).
  [[nodiscard]] std::span<const float> residual() const noexcept { return residual_; }
  /// The residual, bit for bit (checkpoints: it is optimizer-like state).
  void save_state(engine::StateWriter& out) override;
  /// Throws CheckpointError for a residual of another size.
  void load_state(engine::StateReader& in) override;
  /// Sets the residual to zero (a node that takes over another's state: its compression error
  /// is that node's, not to be sent twice).
  void clear() noexcept { std::fill(residual_.begin(), residual_.end(), 0.0f); }

 private:
  std::vector<float> residual_;
};

}  // namespace gradmesh::sync::compress
