#pragma once
// The int8 compressor (issue 28; per-chunk int8 as BytePS's compressor plug-ins): per chunk of
// kInt8ChunkFloats floats, scale = max |p| / 127 and q = round(p / scale), to nearest even. The
// rounding error is exact (Sterbenz's lemma: the decoded value is 0 or within a factor of 2 of p),
// so error feedback wrapped around it loses nothing.
// Wire (little-endian; c = ceil(n / kInt8ChunkFloats) chunks): c x f32 scale, then n x i8:
// 4c + n bytes.

#include <cstddef>

#include "sync/compress/compressor.h"

namespace gradmesh::sync::compress {

/// Floats per int8 chunk (one f32 scale each: 0.8% over 1 byte a float).
inline constexpr std::size_t kInt8ChunkFloats = 512;

/// The registry entry of "int8".
[[nodiscard]] CompressorEntry int8_compressor();

}  // namespace gradmesh::sync::compress
