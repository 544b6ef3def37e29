#pragma once
// Options of strategy `poseidon` (Poseidon ATC'17 sec. 3.2 HybComm, Algorithm 1 BestScheme).

#include <string>

namespace gradmesh::sync {

/// sync.poseidon.*: sufficient-factor broadcasting for dense layers: "auto" (BestScheme per
/// layer), "always", "never" (= strategy ps).
struct PoseidonOptions {
  std::string sfb = "auto";
};

}  // namespace gradmesh::sync
