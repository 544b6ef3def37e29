#pragma once
// 16-bit floats on the wire: IEEE 754 binary16 and bfloat16 conversions, and blocks of floats
// encoded with one power-of-two scale (issue 28). The fp16 and bf16 compressors, the 16-bit
// segments of a ring all-reduce and SFB's factors all encode through these.

#include <cstddef>
#include <cstdint>
#include <span>

#include "tasks/backend.h"

namespace gradmesh::sync::compress {

/// IEEE 754 binary16 from a float, round to nearest even; finite values beyond the largest
/// (65504) saturate to it (a gradient must not become infinite on the wire); NaN stays NaN.
[[nodiscard]] std::uint16_t float_to_fp16(float value) noexcept;
[[nodiscard]] float fp16_to_float(std::uint16_t bits) noexcept;
/// bfloat16 from a float, round to nearest even; NaN stays NaN.
[[nodiscard]] std::uint16_t float_to_bf16(float value) noexcept;
[[nodiscard]] float bf16_to_float(std::uint16_t bits) noexcept;

/// Blocks of floats sent in 16 bits without error feedback: SFB's factors U and V (issue 28:
/// "SFB with its factors U, V in fp16"; Poseidon's SFB composes with compression, the factors are
/// what crosses the wire) and a ring all-reduce's segments. A factor is not a gradient summed over
/// iterations, so there is nothing for a residual to carry; the rounding of one product U^T V is
/// what the rebuild sees.
///
/// fp16 carries a power-of-two `scale` per block: the block's largest magnitude times the scale
/// lies in [2^14, 2^15), so nothing saturates and small output gradients (1e-6 and below) keep
/// binary16's 11 significant bits instead of falling into its subnormals; scaling by a power of
/// two is exact. bf16 has a float's range: its scale is 1. Wire: the block's n values as u16
/// (2n bytes); the scale travels beside it (a sender writes it, SfbLayer's header).

/// The scale of `values` for `format`: for fp16 2^(14 - e) with e the exponent of the largest
/// magnitude, clamped to [2^-100, 2^100]; 1 when the block is all zero, holds a NaN or an
/// infinity, or for bf16. Pure.
[[nodiscard]] float half_block_scale(tasks::HalfFormat format,
                                     std::span<const float> values) noexcept;
/// Writes values[i] * scale in `format` to out[2i .. 2i + 1] (2 n bytes, any alignment), on the
/// CPU's F16C instructions where it has them (the same bits as float_to_fp16). Pure.
void encode_half_block(tasks::HalfFormat format, float scale, std::span<const float> values,
                       std::byte* out) noexcept;
/// The inverse: out[i] = D(in[2i .. 2i + 1]) / scale (exact: a power of two). Pure.
void decode_half_block(tasks::HalfFormat format, float scale, const std::byte* in,
                       std::span<float> out) noexcept;
/// sum[i] += D(in[2i .. 2i + 1]) / scale, in fp32 (a ring's reduce step). Pure.
void decode_add_half_block(tasks::HalfFormat format, float scale, const std::byte* in,
                           std::span<float> sum) noexcept;

}  // namespace gradmesh::sync::compress
