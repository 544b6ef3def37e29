#include "tasks/optim/non_finite.h"

#include <cmath>

namespace gradmesh::tasks {

bool all_finite(std::span<const float> values) noexcept {
  std::uint32_t bad = 0;
  for (const float x : values) bad |= non_finite_bit(x);
  return bad == 0;
}

bool copy_finite(std::span<const float> from, std::span<float> to) noexcept {
  std::uint32_t bad = 0;
  const float* src = from.data();
  float* dst = to.data();
  for (std::size_t i = 0; i < from.size(); ++i) {
    const float x = src[i];
    dst[i] = x;
    bad |= non_finite_bit(x);
  }
  return bad == 0;
}

void NonFiniteGuard::report(std::size_t offset, std::span<const float> values,
                            std::string_view what) noexcept {
  const std::lock_guard lock(mutex_);
  if (first_) return;
  NonFiniteFinding f;
  f.offset = offset;
  f.size = values.size();
  for (const float x : values) {
    if (std::isnan(x)) {
      ++f.nan;
    } else if (std::isinf(x)) {
      ++f.inf;
    }
  }
  try {
    f.what = what;
  } catch (...) {  // out of memory: the finding stands without its words
  }
  first_ = std::move(f);
  tripped_.store(true, std::memory_order_release);
}

std::optional<NonFiniteFinding> NonFiniteGuard::first() const {
  const std::lock_guard lock(mutex_);
  return first_;
}

}  // namespace gradmesh::tasks
