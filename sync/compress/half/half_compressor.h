#pragma once
// The fp16 and bf16 compressors (issue 28; issue 56's registry): every float in 16 bits, round to
// nearest even, with error feedback wrapped around them (the rounding error is exact: codec.h's
// invariant). Wire: n x u16 (2n bytes), little-endian. fp16 saturates at +-65504; bf16 keeps a
// float's range.

#include "sync/compress/compressor.h"

namespace gradmesh::sync::compress {

/// The registry entry of "fp16" (IEEE 754 binary16).
[[nodiscard]] CompressorEntry fp16_compressor();
/// The registry entry of "bf16" (bfloat16: a float's top 16 bits).
[[nodiscard]] CompressorEntry bf16_compressor();

}  // namespace gradmesh::sync::compress
