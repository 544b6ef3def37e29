#pragma once
// Options of the parameter-server scheme (strategies ps, poseidon, auto): its own config table
// [sync.ps] (sync/option_table.h).

#include <cstddef>
#include <optional>

#include "sync/option_table.h"

namespace gradmesh::sync {

/// sync.ps.*: KV chunk size in bytes (Poseidon's KV pair, ATC'17 sec. 4.1); nullopt = auto
/// (topo::KvPlacement::auto_chunk_floats).
struct PsOptions {
  std::optional<std::size_t> chunk_bytes;
};

/// [sync.ps]: chunk_bytes ("auto" or an integer > 0, a multiple of 4).
[[nodiscard]] OptionTable ps_option_table();

/// The [sync.ps] values of `values` (defaults where unset). Throws ContractError if the registry
/// does not hold the table.
[[nodiscard]] PsOptions ps_options(const OptionValues& values);

}  // namespace gradmesh::sync
