#pragma once
// A block of floats through the 16-bit wire and back (sync/compress/codec.h's half blocks), as a
// receiver sees it: the reference of the 16-bit SFB and ring tests.

#include <cstddef>
#include <vector>

#include "sync/compress/codec.h"

namespace gradmesh::testing {

/// `values` encoded with one scale (half_block_scale) in `kind` (kFp16 or kBf16), then decoded.
inline std::vector<float> half_round_trip(sync::compress::CodecKind kind,
                                          std::vector<float> values) {
  const float scale = sync::compress::half_block_scale(sync::compress::half_format(kind), values);
  std::vector<std::byte> wire(2 * values.size());
  sync::compress::encode_half_block(sync::compress::half_format(kind), scale, values, wire.data());
  sync::compress::decode_half_block(sync::compress::half_format(kind), scale, wire.data(), values);
  return values;
}

}  // namespace gradmesh::testing
