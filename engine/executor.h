#pragma once
// Runs task graphs on two oneTBB arenas: one for compute tasks, one for network tasks.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include "engine/graph.h"
#include "engine/observer.h"

namespace gradmesh::engine {

/// Thread counts of the two arenas. The network arena is separate so that communication tasks
/// start the moment their inputs are ready, even while every compute thread is busy (WFBP,
/// Poseidon ATC'17 sec. 3.1; Ako's compute vs network tasks, Ako sec. 4.2).
struct ExecutorOptions {
  std::size_t compute_threads = 1;  ///< >= 1
  std::size_t network_threads = 1;  ///< >= 1
};

/// Runs Graphs: each run executes every task once, in dependency order, each task on its arena.
/// A task that called TaskContext::defer() ends when its Completion is completed.
///
/// Errors: the first exception thrown by a task (or passed to Completion::fail) is rethrown by
/// run() on the caller's thread after the run has drained; tasks not yet started are skipped.
/// Thread safety: run() may be called from one thread at a time per graph; post() from any thread.
/// The Executor must outlive every Completion it handed out.
class Executor {
 public:
  explicit Executor(ExecutorOptions options = {});
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  /// Waits for every job still queued on the arenas.
  ~Executor();

  /// Runs `graph` once and blocks until every task has finished (deferred ones included).
  /// Throws the first task error; ContractError if the graph has a cycle.
  void run(Graph& graph);

  /// Queues `job` on `arena`, outside any graph: event-driven work such as a KV shard summing the
  /// pushes it received. An exception from `job` is kept and rethrown by the next run().
  void post(Arena arena, std::function<void()> job);

  /// Blocks until no job is queued or running on either arena (posted jobs included). Use it
  /// before destroying what queued jobs refer to, e.g. a sync stage after a failed run.
  void wait_idle();

  /// Adds an observer of every task start and end; call before run(), not during.
  void add_observer(std::shared_ptr<Observer> observer);

  [[nodiscard]] const ExecutorOptions& options() const noexcept { return options_; }

  /// Marks `task` of the current run finished (used by Completion).
  void finish(const std::shared_ptr<detail::RunState>& state, std::size_t task, bool failed);

  struct Job;
  /// Runs a queued job on the arena thread that picked it up (internal).
  static void run_job(Job* job);

 private:
  void schedule(const std::shared_ptr<detail::RunState>& state, std::size_t task);
  void execute(const std::shared_ptr<detail::RunState>& state, std::size_t task);
  void enqueue(Arena arena, std::function<void()> job);
  tbb::task_arena& arena(Arena which) noexcept {
    return which == Arena::kCompute ? compute_arena_ : network_arena_;
  }

  ExecutorOptions options_;
  tbb::global_control parallelism_;
  tbb::task_arena compute_arena_;
  tbb::task_arena network_arena_;
  std::vector<std::shared_ptr<Observer>> observers_;

  std::shared_ptr<detail::RunState> cached_state_;  // reused run to run: no allocation per run
  const Graph* checked_graph_ = nullptr;            // the graph last checked for cycles
  std::uint64_t checked_version_ = 0;               // ... at this Graph::version()

  std::mutex mutex_;  // guards outstanding_ waits and background_error_
  std::condition_variable idle_;
  std::size_t outstanding_ = 0;  // jobs queued or running on the arenas
  std::exception_ptr background_error_;
};

}  // namespace gradmesh::engine
