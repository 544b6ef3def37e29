#pragma once
// Options of strategy `poseidon` (Poseidon ATC'17 sec. 3.2 HybComm, Algorithm 1 BestScheme).

#include <string>

namespace gradmesh::sync {

/// sync.poseidon.*.
struct PoseidonOptions {
  /// Sufficient-factor broadcasting for layers with sufficient factors: "auto" (chosen per layer
  /// by `choose`), "always", "never" (= strategy ps).
  std::string sfb = "auto";
  /// How "auto" chooses between PS and SFB: "time" (the planner's predicted time: SFB's rebuild
  /// GEMM against the bytes it saves) or "bytes" (Poseidon's BestScheme, ATC'17 Algorithm 1).
  std::string choose = "time";
};

}  // namespace gradmesh::sync
