#pragma once
// The compressors gradmesh ships, in the order the registry lists them (issue 56: adding one is a
// folder under sync/compress/ and one line in builtin_compressors.cpp).

#include <vector>

#include "sync/compress/compressor.h"

namespace gradmesh::sync::compress {

/// The built-in registry entries; the registry adds them before any other.
[[nodiscard]] std::vector<CompressorEntry> builtin_compressors();

}  // namespace gradmesh::sync::compress
