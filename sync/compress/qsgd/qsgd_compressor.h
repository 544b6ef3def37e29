#pragma once
// The qsgd compressor: `bits` = 2, 4 or 8 bits a float, a sign and a level in [0, s] with
// s = 2^(bits - 1) - 1, rounded stochastically so that the decoded value is unbiased: with
// x = s |p_i| / scale and l = floor(x), level l + 1 with probability x - l, else l, and
// D = sign(p_i) level scale / s; E[D] = p_i (Alistarh et al., "QSGD: Communication-Efficient SGD
// via Gradient Quantization and Encoding", NeurIPS'17, sec. 3.1, with a bucket's max magnitude as
// the scale, the variant whose variance is lowest: E(D - p_i)^2 <= (scale / s)^2 / 4 per entry).
// Error feedback wraps it as it does the others (the registry does so unless told otherwise).
// The rounding draws come from (seed, rank, iteration): every node draws its own, and a rerun the
// same. A NaN or infinity in a chunk makes its scale NaN (it travels, as uncompressed).
// Wire (little-endian; c = ceil(n / kQsgdChunkFloats) chunks): c x f32 scale, then n codes of
// `bits` bits packed from the low bits of each byte up (code = sign << (bits - 1) | level; the
// last byte's unused bits are 0): 4c + ceil(n bits / 8) bytes.

#include <cstddef>

#include "sync/compress/compressor.h"

namespace gradmesh::sync::compress {

/// Floats per qsgd chunk (one f32 scale each; QSGD's bucket size d).
inline constexpr std::size_t kQsgdChunkFloats = 512;

/// The registry entry of "qsgd" (params.bits: 2, 4 or 8; params.seed and rank: the rounding).
[[nodiscard]] CompressorEntry qsgd_compressor();

}  // namespace gradmesh::sync::compress
