#pragma once
// Gradient compressors as codecs of one layer's (or bucket's) gradient, with error feedback
// (issue 28; docs/compression.md). A codec encodes p = g + e (the gradient plus the residual of
// earlier encodes) into bytes C(p), keeps e' = p - D(C(p)) for the next iteration, and decodes a
// peer's bytes into (or onto) floats. What crosses the wire is C(p); a scheme (all-reduce, PS)
// sums the decoded floats in fp32.
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
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/checkpoint.h"

namespace gradmesh::sync::compress {

/// Which compressor (sync.compression).
enum class CodecKind : std::uint8_t {
  kNone,     ///< the floats themselves (4n bytes); no residual
  kFp16,     ///< IEEE 754 binary16, round to nearest even, saturated at +-65504
  kBf16,     ///< bfloat16 (the top 16 bits of a float), round to nearest even
  kInt8,     ///< per chunk of kInt8ChunkFloats: scale = max |p| / 127, q = round(p / scale)
  kTopK,     ///< the k entries of largest magnitude, with their indices
  kRandomK,  ///< k entries at indices drawn from a seed every node shares for the iteration
};

/// Floats per int8 chunk (one f32 scale each: 0.8% over 1 byte a float).
inline constexpr std::size_t kInt8ChunkFloats = 512;

/// The codec's name in configs and plans ("none", "fp16", "bf16", "int8", "topk", "randomk").
[[nodiscard]] std::string_view codec_name(CodecKind kind) noexcept;
/// The inverse of codec_name. Throws ConfigError naming `key` and the known names.
[[nodiscard]] CodecKind parse_codec_kind(std::string_view name,
                                         std::string_view key = "sync.compression");

/// IEEE 754 binary16 from a float, round to nearest even; finite values beyond the largest
/// (65504) saturate to it (a gradient must not become infinite on the wire); NaN stays NaN.
[[nodiscard]] std::uint16_t float_to_fp16(float value) noexcept;
[[nodiscard]] float fp16_to_float(std::uint16_t bits) noexcept;
/// bfloat16 from a float, round to nearest even; NaN stays NaN.
[[nodiscard]] std::uint16_t float_to_bf16(float value) noexcept;
[[nodiscard]] float bf16_to_float(std::uint16_t bits) noexcept;

/// Blocks of floats sent in 16 bits without error feedback: SFB's factors U and V (issue 28:
/// "SFB with its factors U, V in fp16"; Poseidon's SFB composes with compression, the factors are
/// what crosses the wire). A factor is not a gradient summed over iterations, so there is nothing
/// for a residual to carry; the rounding of one product U^T V is what the rebuild sees.
///
/// fp16 carries a power-of-two `scale` per block: the block's largest magnitude times the scale
/// lies in [2^14, 2^15), so nothing saturates and small output gradients (1e-6 and below) keep
/// binary16's 11 significant bits instead of falling into its subnormals; scaling by a power of
/// two is exact. bf16 has a float's range: its scale is 1. Wire: the block's n values as u16
/// (2n bytes); the scale travels beside it (a sender writes it, SfbLayer's header).

/// The scale of `values` for `kind` (kFp16 or kBf16): for kFp16 2^(14 - e) with e the exponent of
/// the largest magnitude, clamped to [2^-100, 2^100]; 1 when the block is all zero, holds a NaN or
/// an infinity, or for kBf16. Pure.
[[nodiscard]] float half_block_scale(CodecKind kind, std::span<const float> values) noexcept;
/// Writes values[i] * scale in `kind` (kFp16 or kBf16) to out[2i .. 2i + 1] (2 n bytes, any
/// alignment). Pure.
void encode_half_block(CodecKind kind, float scale, std::span<const float> values,
                       std::byte* out) noexcept;
/// The inverse: out[i] = D(in[2i .. 2i + 1]) / scale (exact: a power of two). Pure.
void decode_half_block(CodecKind kind, float scale, const std::byte* in,
                       std::span<float> out) noexcept;
/// sum[i] += D(in[2i .. 2i + 1]) / scale, in fp32 (a ring's reduce step). Pure.
void decode_add_half_block(CodecKind kind, float scale, const std::byte* in,
                           std::span<float> sum) noexcept;

/// k, the entries a sparsifying codec keeps of n floats at `ratio`: ceil(ratio n), at least 1
/// (for n > 0) and at most n.
[[nodiscard]] std::size_t kept_entries(std::size_t floats, double ratio) noexcept;

/// Bytes of one encoding of `floats` floats by `kind` keeping `kept` entries (top-k, random-k;
/// ignored by the others): the wire layouts above. Pure.
[[nodiscard]] std::size_t encoded_bytes(CodecKind kind, std::size_t floats,
                                        std::size_t kept) noexcept;

/// What one encode did, for the metrics (issue 28: the relative compression error per layer).
struct EncodeStats {
  double gradient_norm2 = 0;  ///< ||g||^2, the gradient given
  double input_norm2 = 0;     ///< ||p||^2, p = g + e (the gradient with the earlier residual)
  double error_norm2 = 0;     ///< ||p - D(C(p))||^2: the compression error, and with error
                              ///< feedback the new residual's norm^2
};

/// A codec of one buffer of `floats` floats with its error-feedback residual.
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
  /// `ratio` in (0, 1]: the share of entries top-k and random-k keep (ignored by the others).
  /// `seed`: random-k's job seed (the same on every node). `error_feedback`: keep the residual
  /// (none for kNone). Throws ConfigError for a ratio out of range.
  Codec(CodecKind kind, std::size_t floats, double ratio = 1.0, bool error_feedback = true,
        std::uint64_t seed = 0);

  [[nodiscard]] CodecKind kind() const noexcept { return kind_; }
  [[nodiscard]] std::size_t floats() const noexcept { return floats_; }
  /// k for top-k and random-k, else floats().
  [[nodiscard]] std::size_t kept() const noexcept { return kept_; }
  [[nodiscard]] bool error_feedback() const noexcept { return error_feedback_; }
  /// Bytes of one encoding.
  [[nodiscard]] std::size_t encoded_bytes() const noexcept;

  /// Encodes p = `gradient` + residual (floats() floats) into `out` (encoded_bytes() bytes) and,
  /// with error feedback, keeps p - D(C(p)) as the residual. `iteration` seeds random-k's indices
  /// (every node must encode and decode one buffer's iteration t with the same t).
  EncodeStats encode(std::span<const float> gradient, std::span<std::byte> out,
                     std::uint64_t iteration);
  /// Throws ProtocolError when `in` is not an encoding of this codec: a wrong size; top-k: an
  /// index out of range or not ascending (what decode() checks first). A receiver checks a
  /// peer's bytes on arrival with it. Thread-safe (const).
  void check(std::span<const std::byte> in) const;
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
  [[nodiscard]] std::span<const float> residual() const noexcept { return residual_; }
  /// The residual, bit for bit (checkpoints: it is optimizer-like state).
  void save_state(engine::StateWriter& out) override;
  /// Throws CheckpointError for a residual of another size.
  void load_state(engine::StateReader& in) override;

 private:
  template <bool kAdd>
  void decode_into(std::span<const std::byte> in, std::span<float> out,
                   std::uint64_t iteration) const;
  /// Random-k's j-th index of iteration `iteration` (strictly ascending in j).
  [[nodiscard]] std::size_t random_index(std::uint64_t stream, std::size_t j) const noexcept;
  [[nodiscard]] std::uint64_t random_stream(std::uint64_t iteration) const noexcept;

  CodecKind kind_;
  std::size_t floats_;
  std::size_t kept_;
  bool error_feedback_;
  std::uint64_t seed_;
  std::vector<float> residual_;
  std::vector<std::uint32_t> order_;  // top-k's index scratch
};

}  // namespace gradmesh::sync::compress
