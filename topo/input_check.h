#pragma once
// Input checks of the planner's pure functions (topo/cost_model, merge_planner, partition_count,
// planner): a gradmesh::ContractError whose message prints the bad value and what was expected
// (STYLE.md practice 4). Internal to topo/.

#include <cmath>
#include <sstream>
#include <string_view>

#include "engine/error.h"

namespace gradmesh::topo::detail {

/// Throws ContractError "<what> = <value>: expected <expected>" unless `ok`.
template <typename T>
void require(bool ok, std::string_view what, const T& value, std::string_view expected) {
  if (ok) return;
  std::ostringstream out;
  out << what << " = " << value << ": expected " << expected;
  throw ContractError(out.str());
}

/// A time, rate or size that must be a finite number >= 0.
[[nodiscard]] inline bool finite_non_negative(double x) noexcept {
  return std::isfinite(x) && x >= 0;
}

/// A rate that must be a finite number > 0.
[[nodiscard]] inline bool finite_positive(double x) noexcept { return std::isfinite(x) && x > 0; }

}  // namespace gradmesh::topo::detail
