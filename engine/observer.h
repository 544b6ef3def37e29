#pragma once
// Read-only view of task execution for tests and tracing (Taskflow's observer interface).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/task.h"

namespace gradmesh::engine {

/// One task start or end, as an observer sees it. `name` points into the Graph, valid while the
/// graph lives.
struct TaskEvent {
  enum class Kind : std::uint8_t { kStart, kEnd };
  Kind kind = Kind::kStart;
  std::string_view name;
  std::size_t task = 0;  ///< index of the task in its graph
  Arena arena = Arena::kCompute;
  std::uint64_t run = 0;  ///< TaskContext::run() of that execution
  std::chrono::steady_clock::time_point time;
  bool failed = false;  ///< kEnd only: the task threw or its Completion failed
};

/// Sees every task start and end. Thread safety: called concurrently from the compute and network
/// arenas and, for deferred tasks, from whatever thread completes them; implementations must be
/// thread-safe and quick, and must not throw.
class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_task_start(const TaskEvent& event) noexcept = 0;
  virtual void on_task_end(const TaskEvent& event) noexcept = 0;
};

}  // namespace gradmesh::engine
