#pragma once
// The top-k compressor (issue 28): the k = ceil(ratio n) entries of largest magnitude, with their
// indices; with error feedback wrapped around it, the unsent entries stay in the residual (Stich,
// Cordonnier, Jaggi, "Sparsified SGD with Memory", NeurIPS'18, Alg. 1: no rescaling of the kept
// entries). Nodes send different indices, so encodings are gathered, not summed on a ring.
// Wire (little-endian): k x u32 index (strictly ascending), then k x f32 value: 8k bytes.

#include "sync/compress/compressor.h"

namespace gradmesh::sync::compress {

/// The registry entry of "topk" (params.ratio: the share of entries kept, in (0, 1]).
[[nodiscard]] CompressorEntry topk_compressor();

}  // namespace gradmesh::sync::compress
