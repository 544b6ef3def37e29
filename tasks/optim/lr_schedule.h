#pragma once
// Learning-rate schedules: the learning rate of each iteration as a function of the iteration
// number alone, so every node, every strategy and a resumed run step with the same rate.

#include <cstdint>
#include <string_view>

namespace gradmesh::tasks {

/// How the learning rate moves over a job (config key optimizer.schedule).
enum class LrScheduleKind {
  kConstant,  ///< lr at every iteration
  kCosine,    ///< cosine annealing from lr to 0 over the job (Loshchilov and Hutter, SGDR,
              ///< ICLR'17, eq. 5 with eta_min = 0 and no restart; PyTorch's CosineAnnealingLR)
};

/// Parses "constant" or "cosine"; throws gradmesh::ConfigError naming optimizer.schedule for
/// anything else.
[[nodiscard]] LrScheduleKind parse_lr_schedule(std::string_view name);

/// A schedule over a job of `total_iterations` iterations starting from `base_lr`.
struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  float base_lr = 0.1f;                ///< optimizer.lr
  std::uint64_t total_iterations = 1;  ///< the job's iterations (epochs x iterations per epoch)

  /// The learning rate of iteration `t` (0-based: t = 0 is the first step). Constant: base_lr.
  /// Cosine: base_lr (1 + cos(pi t / T)) / 2 with T = total_iterations, which is base_lr at t = 0
  /// and falls to base_lr (1 + cos(pi (T - 1) / T)) / 2 > 0 at the last step; t >= T gives 0.
  /// Pure and thread-safe.
  [[nodiscard]] float at(std::uint64_t t) const noexcept;
};

}  // namespace gradmesh::tasks
