#include "engine/executor.h"

#include <algorithm>
#include <string>
#include <thread>

#include "engine/arena_dispatch.h"

namespace gradmesh::engine {

namespace detail {

/// The bookkeeping of one run of one graph, shared with the Completions handed out during it.
struct RunState {
  Executor* executor = nullptr;
  const Graph* graph = nullptr;
  std::atomic<std::uint64_t> run{0};
  std::vector<std::size_t> degrees;               // predecessors per task (the graph's in-degrees)
  std::vector<std::atomic<std::size_t>> pending;  // unfinished predecessors per task
  std::vector<std::atomic<bool>> finished;        // per task: finish() took effect
  // Per deferred task: what must still happen before it ends — its function returning and its
  // Completion firing (2 after defer()); whoever brings it to 0 finishes the task.
  std::vector<std::atomic<int>> holds;
  std::vector<std::atomic<bool>> completed;  // per task: its Completion fired once
  std::atomic<std::size_t> remaining{0};     // tasks not yet finished
  std::atomic<bool> failed{false};

  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::exception_ptr error;  // the first error of the run

  void record_error(std::exception_ptr e) {
    std::lock_guard lock(mutex);
    if (!error) error = std::move(e);
    failed.store(true, std::memory_order_release);
  }
};

}  // namespace detail

std::string_view to_string(Arena arena) noexcept {
  return arena == Arena::kCompute ? "compute" : "network";
}

Completion TaskContext::defer() {
  GRADMESH_CHECK(!deferred_, "task '" + std::string(name_) + "' called defer() twice");
  deferred_ = true;
  state_->holds[task_].store(2, std::memory_order_relaxed);
  return Completion(state_, task_, run_);
}

namespace {
/// Releases one of a deferred task's two holds; the last one finishes it.
void release_hold(const std::shared_ptr<detail::RunState>& state, std::size_t task, bool failed) {
  if (state->holds[task].fetch_sub(1, std::memory_order_acq_rel) == 1) {
    state->executor->finish(state, task, failed || state->failed.load(std::memory_order_acquire));
  }
}
}  // namespace

void Completion::complete() const {
  if (!state_ || state_->run != run_ || state_->completed[task_].exchange(true)) return;
  release_hold(state_, task_, false);
}

void Completion::fail(std::exception_ptr error) const {
  if (!state_ || state_->run != run_ || state_->completed[task_].exchange(true)) return;
  state_->record_error(std::move(error));
  release_hold(state_, task_, true);
}

Executor::Executor(ExecutorOptions options)
    : options_(options),
      // Both arenas need their own workers even on a 2-core machine, or a network task would wait
      // for a compute task to end: allow compute + network workers, +1 for the caller, and room
      // for a compute task's own parallel loops (the CPU backend's kernel arena, up to the
      // machine's cores; TBB starts workers only when an arena asks for them).
      parallelism_(tbb::global_control::max_allowed_parallelism,
                   std::max<std::size_t>(options.compute_threads, 1) +
                       std::max<std::size_t>(options.network_threads, 1) + 1 +
                       std::max<std::size_t>(std::thread::hardware_concurrency(), 1)),
      compute_arena_(static_cast<int>(std::max<std::size_t>(options.compute_threads, 1)), 0),
      network_arena_(static_cast<int>(std::max<std::size_t>(options.network_threads, 1)), 0) {
  GRADMESH_CHECK(options.compute_threads >= 1, "ExecutorOptions::compute_threads must be >= 1");
  GRADMESH_CHECK(options.network_threads >= 1, "ExecutorOptions::network_threads must be >= 1");
}

Executor::~Executor() { wait_idle(); }

void Executor::wait_idle() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [this] { return outstanding_ == 0; });
}

void Executor::add_observer(std::shared_ptr<Observer> observer) {
  GRADMESH_CHECK(observer != nullptr, "add_observer(nullptr)");
  observers_.push_back(std::move(observer));
}

/// A queued job: what the arena's worker runs, and whom to tell when it is done.
struct Executor::Job {
  Executor* executor;
  std::function<void()> fn;
};

void Executor::run_job(Job* job) {
  detail::received(job);
  job->fn();
  Executor* executor = job->executor;
  delete job;
  std::lock_guard lock(executor->mutex_);
  if (--executor->outstanding_ == 0) executor->idle_.notify_all();
}

void Executor::enqueue(Arena which, std::function<void()> fn) {
  {
    std::lock_guard lock(mutex_);
    ++outstanding_;
  }
  detail::dispatch(arena(which), new Job{this, std::move(fn)});
}

void Executor::post(Arena which, std::function<void()> job) {
  enqueue(which, [this, job = std::move(job)] {
    try {
      job();
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!background_error_) background_error_ = std::current_exception();
    }
  });
}

void Executor::run(Graph& graph) {
  {
    std::lock_guard lock(mutex_);
    if (background_error_) std::rethrow_exception(std::exchange(background_error_, nullptr));
  }
  const std::size_t n = graph.size();
  if (n == 0) return;
  const bool changed = checked_graph_ != &graph || checked_version_ != graph.version();
  if (changed) {
    graph.check_acyclic();
    checked_graph_ = &graph;
    checked_version_ = graph.version();
  }

  std::shared_ptr<detail::RunState> state = cached_state_;
  // A Completion of an earlier run may still hold the state: then it cannot be reused.
  if (changed || !state || state.use_count() > 2 || state->graph != &graph) {
    state = std::make_shared<detail::RunState>();
    state->executor = this;
    state->graph = &graph;
    state->degrees = graph.in_degrees();
    state->pending = std::vector<std::atomic<std::size_t>>(n);
    state->finished = std::vector<std::atomic<bool>>(n);
    state->holds = std::vector<std::atomic<int>>(n);
    state->completed = std::vector<std::atomic<bool>>(n);
    cached_state_ = state;
  }
  const std::vector<std::size_t>& degrees = state->degrees;
  for (std::size_t i = 0; i < n; ++i) {
    state->pending[i].store(degrees[i], std::memory_order_relaxed);
    state->finished[i].store(false, std::memory_order_relaxed);
    state->holds[i].store(0, std::memory_order_relaxed);
    state->completed[i].store(false, std::memory_order_relaxed);
  }
  state->remaining.store(n, std::memory_order_relaxed);
  state->failed.store(false, std::memory_order_relaxed);
  state->done = false;
  state->error = nullptr;
  state->run.store(graph.runs_++, std::memory_order_release);

  for (std::size_t i = 0; i < n; ++i) {
    if (degrees[i] == 0) schedule(state, i);
  }
  std::exception_ptr error;
  {
    std::unique_lock lock(state->mutex);
    state->done_cv.wait(lock, [&] { return state->done; });
    error = state->error;
  }
  if (error) std::rethrow_exception(error);
}

void Executor::schedule(const std::shared_ptr<detail::RunState>& state, std::size_t task) {
  enqueue(state->graph->arena(task), [this, state, task] { execute(state, task); });
}

void Executor::execute(const std::shared_ptr<detail::RunState>& state, std::size_t task) {
  const Graph& graph = *state->graph;
  if (state->failed.load(std::memory_order_acquire)) {
    finish(state, task, true);  // skipped: an earlier task of this run failed
    return;
  }
  TaskEvent event{TaskEvent::Kind::kStart,
                  graph.name(task),
                  task,
                  graph.arena(task),
                  state->run.load(),
                  std::chrono::steady_clock::now(),
                  false};
  for (const auto& observer : observers_) observer->on_task_start(event);

  TaskContext ctx(state, task, state->run.load(), graph.name(task));
  try {
    graph.invoke(task, ctx);
  } catch (...) {
    // A deferred task that throws ends now; its Completion, if it still fires, is ignored.
    state->record_error(std::current_exception());
    finish(state, task, true);
    return;
  }
  if (ctx.deferred()) {
    release_hold(state, task, false);
  } else {
    finish(state, task, false);
  }
}

void Executor::finish(const std::shared_ptr<detail::RunState>& state, std::size_t task,
                      bool failed) {
  if (task >= state->finished.size() || state->finished[task].exchange(true)) return;
  const Graph& graph = *state->graph;
  if (!observers_.empty()) {
    TaskEvent event{TaskEvent::Kind::kEnd,
                    graph.name(task),
                    task,
                    graph.arena(task),
                    state->run.load(),
                    std::chrono::steady_clock::now(),
                    failed};
    for (const auto& observer : observers_) observer->on_task_end(event);
  }
  for (std::size_t next : graph.successors(task)) {
    if (state->pending[next].fetch_sub(1, std::memory_order_acq_rel) == 1) schedule(state, next);
  }
  if (state->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::lock_guard lock(state->mutex);
    state->done = true;
    state->done_cv.notify_all();
  }
}

}  // namespace gradmesh::engine
