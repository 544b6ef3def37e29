#pragma once
// Tasks of the dataflow engine: where they run, what they see while running, and how a task that
// waits on an outside event (a message from a peer) finishes later without blocking a thread.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string_view>

namespace gradmesh::engine {

/// The two thread pools a task can run on. Compute tasks (forward, backward, optimizer steps) and
/// network tasks (serialising, pushing, applying received updates) run on separate oneTBB arenas,
/// so a long GEMM never delays the send of a gradient that is ready (Ako sec. 4, Fig. 7;
/// Poseidon ATC'17 sec. 3.1, WFBP).
enum class Arena : std::uint8_t { kCompute = 0, kNetwork = 1 };

/// "compute" or "network".
[[nodiscard]] std::string_view to_string(Arena arena) noexcept;

namespace detail {
struct RunState;
}

/// Finishes a deferred task (see TaskContext::defer). Copyable handle; exactly one of complete()
/// or fail() takes effect, later calls (and calls for a run that has ended) are ignored. The task
/// ends when both its function has returned and its Completion has been completed, whichever comes
/// last, so a run never ends while a task body still runs. Thread safety: may be called from any
/// thread, including the network event loop (it only schedules the task's successors).
class Completion {
 public:
  Completion() = default;
  /// Marks the task finished; its successors become ready.
  void complete() const;
  /// Marks the task failed; Executor::run rethrows `error` on the caller's thread.
  void fail(std::exception_ptr error) const;
  /// True for a handle obtained from TaskContext::defer (false when default-constructed).
  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }

 private:
  friend class TaskContext;
  Completion(std::shared_ptr<detail::RunState> state, std::size_t task, std::uint64_t run) noexcept
      : state_(std::move(state)), task_(task), run_(run) {}
  std::shared_ptr<detail::RunState> state_;
  std::size_t task_ = 0;
  std::uint64_t run_ = 0;
};

/// What a task sees while it runs. Valid only during the task's function call.
class TaskContext {
 public:
  /// How many times the graph ran before this run (0 for the first): the iteration number when
  /// one run is one training iteration.
  [[nodiscard]] std::uint64_t run() const noexcept { return run_; }
  /// The task's name as given to Graph::emplace.
  [[nodiscard]] std::string_view name() const noexcept { return name_; }
  /// Defers the task's end: returning from the task function no longer finishes it; the returned
  /// Completion does. Use it for a task that waits on the network (e.g. "all chunks of layer l are
  /// back") without holding a thread. Throws ContractError when called twice.
  [[nodiscard]] Completion defer();

  TaskContext(std::shared_ptr<detail::RunState> state, std::size_t task, std::uint64_t run,
              std::string_view name) noexcept
      : state_(std::move(state)), task_(task), run_(run), name_(name) {}
  [[nodiscard]] bool deferred() const noexcept { return deferred_; }

 private:
  std::shared_ptr<detail::RunState> state_;
  std::size_t task_;
  std::uint64_t run_;
  std::string_view name_;
  bool deferred_ = false;
};

/// The body of a task. Exceptions thrown here fail the run and come back from Executor::run.
using TaskFunction = std::function<void(TaskContext&)>;

}  // namespace gradmesh::engine
