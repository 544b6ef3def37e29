#pragma once
// Options of the parameter-server scheme (strategies ps, poseidon).

#include <cstddef>
#include <optional>

namespace gradmesh::sync {

/// sync.ps.*: KV chunk size in bytes (Poseidon's KV pair, ATC'17 sec. 4.1); nullopt = auto
/// (topo::KvPlacement::auto_chunk_floats).
struct PsOptions {
  std::optional<std::size_t> chunk_bytes;
};

}  // namespace gradmesh::sync
