#pragma once
// Options of strategy `poseidon` (Poseidon ATC'17 sec. 3.2 HybComm, Algorithm 1 BestScheme).

#include <string>

#include "sync/option_table.h"

namespace gradmesh::topo {
struct PlannerInput;
}

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

/// [sync.poseidon]: sfb (auto, always, never), choose (time, bytes).
[[nodiscard]] OptionTable poseidon_option_table();

/// The [sync.poseidon] values of `values` (defaults where unset).
[[nodiscard]] PoseidonOptions poseidon_options(const OptionValues& values);

/// Applies `options` to the planner's input of strategy poseidon: sfb = never: no SFB; always: SFB
/// fixed on every layer with sufficient factors; choose = bytes: every other layer with parameters
/// fixed by Poseidon's BestScheme (topo::best_scheme, floats per node; SFB or PS), on several
/// nodes; time: the planner chooses by predicted time. Throws ConfigError naming a bad option.
void apply_poseidon_options(const PoseidonOptions& options, topo::PlannerInput& input);

}  // namespace gradmesh::sync
