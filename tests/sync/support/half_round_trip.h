#pragma once
// A block of floats through the 16-bit wire and back (sync/compress/half/half_block.h), as a
// receiver sees it: the reference of the 16-bit SFB and ring tests.

#include <cstddef>
#include <string_view>
#include <vector>

#include "engine/error.h"
#include "sync/compress/half/half_block.h"

namespace gradmesh::testing {

/// The 16-bit format of compressor `name` ("fp16" or "bf16").
inline tasks::HalfFormat half_format_of(std::string_view name) {
  if (name == "fp16") return tasks::HalfFormat::kFp16;
  if (name == "bf16") return tasks::HalfFormat::kBf16;
  throw ContractError("half_format_of: not a 16-bit compressor");
}

/// `values` encoded with one scale (half_block_scale) in the 16-bit format of compressor `name`
/// ("fp16" or "bf16"), then decoded.
inline std::vector<float> half_round_trip(std::string_view name, std::vector<float> values) {
  const tasks::HalfFormat format = half_format_of(name);
  const float scale = sync::compress::half_block_scale(format, values);
  std::vector<std::byte> wire(2 * values.size());
  sync::compress::encode_half_block(format, scale, values, wire.data());
  sync::compress::decode_half_block(format, scale, wire.data(), values);
  return values;
}

}  // namespace gradmesh::testing
