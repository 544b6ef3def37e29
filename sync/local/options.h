#pragma once
// [sync.local]: local SGD with an outer optimizer (DiLoCo, Douillard et al., arXiv 2311.08105;
// sync/local/local_stage.h): H inner steps, then the outer step on the nodes' mean change.

#include <cstddef>
#include <optional>
#include <string>

#include "sync/option_table.h"

namespace gradmesh::sync {

/// The outer optimizer of strategy local (sync.local.outer; values in the order of their names in
/// options.cpp).
enum class OuterKind {
  kNesterov,  ///< SGD with Nesterov momentum on the pseudo-gradient (DiLoCo's)
  kSgd,       ///< SGD with heavy-ball momentum (outer_momentum 0: plain SGD)
  kAverage,   ///< plain periodic model averaging: outer lr 1, no momentum
};

/// Whether and how the outer exchange overlaps the next round (sync.local.overlap; values in the
/// order of their names in options.cpp).
enum class OverlapKind {
  kOff,      ///< every node waits for the exchange at the round's end (DiLoCo as published)
  kEager,    ///< one round late, each node going on from a tentative outer step (LocalStage)
  kDelayed,  ///< one round late, each node going on from the global model plus its own change
};

/// sync.local.*.
struct LocalOptions {
  /// H, the inner steps between outer exchanges (>= 1); nullopt: "auto" (local_steps_for()).
  std::optional<std::size_t> steps;
  OuterKind outer = OuterKind::kNesterov;
  double outer_lr = 0.7;        ///< the outer step's learning rate (> 0; DiLoCo's 0.7)
  double outer_momentum = 0.9;  ///< the outer momentum, in [0, 1) (DiLoCo's 0.9)
  /// The outer exchange runs while the next round's inner steps compute (not kOff): the outer
  /// step of round r is applied at round r + 1's end (one round delayed; LocalStage).
  OverlapKind overlap = OverlapKind::kOff;
  /// F: the model is exchanged in F fragments at staggered points of the round (Streaming
  /// DiLoCo, Douillard et al., arXiv 2501.18512, sec. 2.2; LocalStage). 1 <= F <= H.
  std::size_t fragments = 1;
  /// Quorum rounds (sync/local/quorum_rounds.h; Decoupled DiLoCo, arXiv 2604.21428): a merge
  /// takes the Deltas of this many distinct nodes (at most the live nodes still training), so a
  /// slow or failed node holds no one back; nullopt: "all", every node's Delta each round on a
  /// ring (DiLoCo's synchronous rounds).
  std::optional<std::size_t> quorum;
};

/// [sync.local]: steps ("auto" or an integer >= 1, default "auto"), outer ("nesterov", "sgd",
/// "average"; default "nesterov"), outer_lr (a number > 0, default 0.7), outer_momentum (a number
/// in [0, 1), default 0.9), overlap ("off", "eager", "delayed"; default "off"), fragments (an
/// integer >= 1, default 1), quorum ("all" or a node count >= 1, default "all").
[[nodiscard]] OptionTable local_option_table();

/// The [sync.local] values of `values` (defaults where unset).
[[nodiscard]] LocalOptions local_options(const OptionValues& values);

/// The name of `kind` in configs ("nesterov").
[[nodiscard]] std::string outer_name(OuterKind kind);
/// The name of `kind` in configs ("eager").
[[nodiscard]] std::string overlap_name(OverlapKind kind);

}  // namespace gradmesh::sync
