#pragma once
// The error a node stops on when its loss or an update of its model is NaN or Inf (the
// non-finite guard, issue 59; tasks/optim/non_finite.h; job.on_nonfinite).

#include <cstdint>
#include <string>

#include "engine/error.h"

namespace gradmesh::app {

/// A non-finite training loss or model update on this node, at one iteration. Thrown by the
/// training loop after the iteration's step, on every node of a BSP job at the same iteration
/// (each steps the same summed gradient); caught by run_with_recovery(), which rolls the job back
/// once when rolls_back() (job.on_nonfinite = "rollback"), else rethrows: the node exits
/// non-zero. Its what() names the node, the iteration, the layer, what was not finite and what a
/// user may try.
class NonFiniteError : public Error {
 public:
  NonFiniteError(const std::string& what, std::uint64_t iteration, bool rolls_back)
      : Error(what), iteration_(iteration), rolls_back_(rolls_back) {}
  /// The iteration whose loss or update was not finite, 1-based over the job.
  [[nodiscard]] std::uint64_t iteration() const noexcept { return iteration_; }
  /// Whether the job rolls back to its newest checkpoint (the first non-finite value under
  /// job.on_nonfinite = "rollback", with checkpoint.dir under a BSP strategy).
  [[nodiscard]] bool rolls_back() const noexcept { return rolls_back_; }

 private:
  std::uint64_t iteration_;
  bool rolls_back_;
};

}  // namespace gradmesh::app
