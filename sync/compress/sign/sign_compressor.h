#pragma once
// The sign compressor: 1 bit a float and one scale a chunk, the mean magnitude of the chunk's
// entries, so a chunk decodes to +-scale (EF-SignSGD: delta = (||p||_1 / d) sign(p), Karimireddy
// et al., "Error Feedback Fixes SignSGD and other Gradient Compression Schemes", ICML'19, Alg. 1
// and 2; 1-bit SGD with error feedback, Seide et al., Interspeech'14). Biased: it is meant to run
// with error feedback wrapped around it (the registry does so unless told otherwise). An entry of
// exactly 0 is sent as +scale; a NaN in a chunk makes its scale NaN (it travels, as uncompressed).
// Wire (little-endian; c = ceil(n / kSignChunkFloats) chunks): c x f32 scale, then ceil(n / 8)
// bytes of sign bits (entry i is bit i % 8 of byte i / 8, 1 for negative; the last byte's unused
// bits are 0): 4c + ceil(n / 8) bytes, about 0.133 bytes a float.

#include <cstddef>

#include "sync/compress/compressor.h"

namespace gradmesh::sync::compress {

/// Floats per sign chunk (one f32 scale each).
inline constexpr std::size_t kSignChunkFloats = 512;

/// The registry entry of "sign".
[[nodiscard]] CompressorEntry sign_compressor();

}  // namespace gradmesh::sync::compress
