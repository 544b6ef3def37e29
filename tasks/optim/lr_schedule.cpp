#include "tasks/optim/lr_schedule.h"

#include <cmath>
#include <numbers>
#include <string>

#include "engine/error.h"

namespace gradmesh::tasks {

LrScheduleKind parse_lr_schedule(std::string_view name) {
  if (name == "constant") return LrScheduleKind::kConstant;
  if (name == "cosine") return LrScheduleKind::kCosine;
  throw ConfigError("optimizer.schedule: expected one of constant, cosine, got '" +
                    std::string(name) + "'");
}

float LrSchedule::at(std::uint64_t t) const noexcept {
  switch (kind) {
    case LrScheduleKind::kConstant:
      return base_lr;
    case LrScheduleKind::kCosine: {
      if (total_iterations == 0 || t >= total_iterations) return 0.0f;
      const double phase =
          std::numbers::pi * static_cast<double>(t) / static_cast<double>(total_iterations);
      return static_cast<float>(static_cast<double>(base_lr) * 0.5 * (1.0 + std::cos(phase)));
    }
  }
  return base_lr;
}

}  // namespace gradmesh::tasks
