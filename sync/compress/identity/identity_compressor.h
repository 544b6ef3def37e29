#pragma once
// The identity compressor, "none": the floats themselves (4n bytes), nothing lost, so no error
// feedback. What a scheme holds where nothing is compressed, so it needs no second path.

#include "sync/compress/compressor.h"

namespace gradmesh::sync::compress {

/// The registry entry of "none".
[[nodiscard]] CompressorEntry identity_compressor();

}  // namespace gradmesh::sync::compress
