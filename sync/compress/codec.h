#pragma once
// Gradient compressors as codecs of one layer's (or bucket's) gradient, with error feedback
// (issue 28; docs/compression.md): a registered compressor (compressor.h) by name, with error
// feedback (error_feedback.h) wrapped around it where asked. A codec encodes p = g + e (the
// gradient plus the residual of earlier encodes) into bytes C(p), keeps e' = p - D(C(p)) for the
// next iteration, and decodes a peer's bytes into (or onto) floats. What crosses the wire is C(p);
// a scheme (all-reduce, PS) sums the decoded floats in fp32.
//
// Sources: error feedback (memory) as in Seide et al., "1-Bit Stochastic Gradient Descent"
// (Interspeech'14) and Karimireddy et al., "Error Feedback Fixes SignSGD" (ICML'19, Alg. 2:
// p = g + e, delta = C(p), e = p - delta); top-k and random-k with memory as in Stich, Cordonnier,
// Jaggi, "Sparsified SGD with Memory" (NeurIPS'18, Alg. 1: no rescaling of the kept entries);
// per-chunk int8 as BytePS's compressor plugins (docs/gradient-compression.md).
//
// Wire layouts (little-endian; n floats, k kept entries, c = ceil(n / kInt8ChunkFloats) chunks):
//   fp16, bf16   n x u16                                    2n bytes
//   int8         c x f32 scale, then n x i8                 4c + n bytes
//   topk         k x u32 index (strictly ascending), then k x f32 value      8k bytes
//   randomk      k x f32 value (the indices come from the iteration's seed)  4k bytes

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "engine/checkpoint.h"
#include "sync/compress/compressor.h"
#include "sync/compress/error_feedback.h"

namespace gradmesh::sync::compress {

/// A codec of one buffer of `floats` floats with its error-feedback residual: a registered
/// compressor (compressor.h) by name and, with error feedback, an ErrorFeedback around it.
///
/// Bytes: encoded_bytes() is exact and fixed for the codec (a receiver checks it). Encode and
/// decode allocate nothing after construction (top-k keeps an index scratch of n).
///
/// Invariant (error feedback on): after each encode, D(C(p)) + e' == p, element by element and
/// bit for bit for every codec (fp16, bf16, int8: Sterbenz's lemma, the decoded value is 0 or
/// within a factor of 2 of p, so p - D(C(p)) is exact; top-k, random-k: entries are copied), so
/// over any run the floats sent plus the residual sum to the gradients given. (fp16 values
/// saturated at 65504 from beyond 131008 are the one exception: their residual is rounded.)
///
/// Thread safety: encode() and the residual's save/load mutate the codec (one owner: the layer's
/// task); decode() and decode_add() are const and may run on any thread at once. Errors:
/// decode() throws ProtocolError, writing nothing, for bytes that are not an encoding of this
/// codec (a wrong size; top-k: an index out of range or not ascending). Values are not checked:
/// a NaN travels as it would uncompressed.
class Codec final : public engine::Checkpointable {
 public:
  /// The registered compressor `method` (compressor.h) with `params`, with error feedback where
  /// asked (not for a lossless one). Throws ConfigError for an unknown name or parameters out of
  /// its range.
  Codec(std::string_view method, std::size_t floats, const CompressorParams& params,
        bool error_feedback);

  /// Wraps the compressor (with its error feedback) in DGC's momentum correction (Lin et al.,
  /// ICLR'18, sec. 3.2; momentum_correction.h): encode() then adds the gradient into `velocity`
  /// (floats() floats the caller owns: the optimizer's slice of the layer) with momentum
  /// `momentum`, encodes the velocity and zeroes it where the encoding sent. Once, before the
  /// first encode. Throws ContractError for a velocity of another size or a second call.
  void correct_momentum(float momentum, std::span<float> velocity);

  /// The compressor's registered name ("fp16").
  [[nodiscard]] std::string_view name() const noexcept { return compressor_->name(); }
  [[nodiscard]] std::size_t floats() const noexcept { return compressor_->floats(); }
  /// k for top-k and random-k, else floats().
  [[nodiscard]] std::size_t kept() const noexcept { return compressor_->kept(); }
  [[nodiscard]] bool error_feedback() const noexcept { return feedback_ != nullptr; }
  /// Bytes of one encoding.
  [[nodiscard]] std::size_t encoded_bytes() const noexcept { return compressor_->encoded_bytes(); }
  /// The compressor (with its error feedback, where the codec keeps a residual).
  [[nodiscard]] const Compressor& compressor() const noexcept { return *compressor_; }

  /// Encodes p = `gradient` + residual (floats() floats) into `out` (encoded_bytes() bytes) and,
  /// with error feedback, keeps p - D(C(p)) as the residual. `iteration` seeds random-k's indices
  /// (every node must encode and decode one buffer's iteration t with the same t).
  EncodeStats encode(std::span<const float> gradient, std::span<std::byte> out,
                     std::uint64_t iteration);
  /// Throws ProtocolError when `in` is not an encoding of this codec: a wrong size; top-k: an
  /// index out of range or not ascending (what decode() checks first). A receiver checks a
  /// peer's bytes on arrival with it. Thread-safe (const).
  void check(std::span<const std::byte> in) const { compressor_->check(in); }
  /// Writes D(`in`) into `out` (floats() floats; random-k's untouched entries are set to 0).
  void decode(std::span<const std::byte> in, std::span<float> out, std::uint64_t iteration) const;
  /// Adds D(`in`) into `sum` (floats() floats): a receiver's sum in fp32.
  void decode_add(std::span<const std::byte> in, std::span<float> sum,
                  std::uint64_t iteration) const;

  /// Sets values[i] = 0 at every index i the encoding `in` (of iteration `iteration`) sent:
  /// top-k's indices, random-k's drawn ones, every index for the dense codecs. DGC's momentum
  /// factor masking (Lin et al., ICLR'18, sec. 3.2). `values`: floats() floats. Throws as check().
  void mask_sent(std::span<const std::byte> in, std::span<float> values,
                 std::uint64_t iteration) const;

  /// The error-feedback residual (floats() floats; empty without error feedback).
  [[nodiscard]] std::span<const float> residual() const noexcept;
  /// The residual, bit for bit (checkpoints: it is optimizer-like state).
  void save_state(engine::StateWriter& out) override;
  /// Throws CheckpointError for a residual of another size.
  void load_state(engine::StateReader& in) override;
  /// Sets the error-feedback residual to zero (nothing without error feedback).
  void clear_residual() noexcept {
    if (feedback_ != nullptr) feedback_->clear();
  }

 private:
  std::unique_ptr<Compressor> compressor_;
  ErrorFeedback* feedback_ = nullptr;  // compressor_ itself, where it keeps a residual
};

}  // namespace gradmesh::sync::compress
