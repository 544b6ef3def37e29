#pragma once
// The CPU backend's parallel loops (internal to tasks/cpu/): items split over set_threads()'
// oneTBB arena, each computed whole by one thread, so results are the same bits for any split.

#include <algorithm>
#include <cstddef>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

namespace gradmesh::tasks::cpu {

/// The arena the kernels' loops run on: set_threads()' n threads, or nullptr (run inline) for
/// n = 1 and inside a run_chunks body (the chunks already hold the arena's threads). Thread-safe.
[[nodiscard]] tbb::task_arena* loop_arena() noexcept;

/// Runs body(lo, hi) over the items [0, n), each about `work` floats of memory traffic, in ranges
/// of at least kParallelGrain floats across the kernel arena's threads (set_threads). Every item
/// is computed by one thread in the serial order, so results are bitwise the same for any split
/// and thread count. With one thread, or under two ranges' work, it runs inline on the caller.
constexpr std::size_t kParallelGrain = std::size_t{1} << 15;

template <class Body>
void parallel_items(std::size_t n, std::size_t work, Body&& body) {
  const std::size_t grain =
      std::max<std::size_t>(1, kParallelGrain / std::max<std::size_t>(work, 1));
  tbb::task_arena* arena = n < 2 * grain ? nullptr : loop_arena();
  if (arena == nullptr) {
    body(std::size_t{0}, n);
    return;
  }
  arena->execute([&] {
    tbb::parallel_for(
        tbb::blocked_range<std::size_t>(0, n, grain),
        [&body](const tbb::blocked_range<std::size_t>& r) { body(r.begin(), r.end()); });
  });
}

}  // namespace gradmesh::tasks::cpu
