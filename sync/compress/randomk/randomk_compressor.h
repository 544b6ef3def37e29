#pragma once
// The random-k compressor (issue 28): k = ceil(ratio n) entries at indices drawn from the job's
// seed and the iteration, the same on every node, so encodings sum entry by entry (a ring); with
// error feedback wrapped around it the unsent entries stay in the residual (Stich et al.,
// NeurIPS'18, Alg. 1). The indices are stratified: the j-th of k equal strata of [0, n), one
// uniform index in each (distinct and ascending by construction).
// Wire (little-endian): k x f32 value (the indices come from the iteration's seed): 4k bytes.

#include "sync/compress/compressor.h"

namespace gradmesh::sync::compress {

/// The registry entry of "randomk" (params.ratio: the share kept; params.seed: the job's seed).
[[nodiscard]] CompressorEntry randomk_compressor();

}  // namespace gradmesh::sync::compress
