#pragma once
// The task graph: the graph owns tasks and their state; handles own nothing (Taskflow's model).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "engine/task.h"

namespace gradmesh::engine {

class Graph;

/// A non-owning reference to a task of a Graph; cheap to copy; valid while its graph lives.
class TaskHandle {
 public:
  TaskHandle() = default;
  /// Adds the edge this -> `next`: `next` starts only after this task has finished (in each run).
  const TaskHandle& precede(TaskHandle next) const;
  /// Adds the edge `previous` -> this.
  const TaskHandle& succeed(TaskHandle previous) const;
  [[nodiscard]] std::string_view name() const;
  [[nodiscard]] std::size_t index() const noexcept { return index_; }
  [[nodiscard]] bool valid() const noexcept { return graph_ != nullptr; }

 private:
  friend class Graph;
  TaskHandle(Graph* graph, std::size_t index) noexcept : graph_(graph), index_(index) {}
  Graph* graph_ = nullptr;
  std::size_t index_ = 0;
};

/// A static DAG of tasks, run once per Executor::run call (one run = one training iteration, say).
/// Tasks are *stateful*: each may own an explicit state object that lives as long as the graph and
/// persists from run to run, so the dataflow carries state across iterations (e.g. momentum,
/// an accumulation queue) without globals.
///
/// Thread safety: build the graph (emplace, precede) from one thread, before and between runs; do
/// not change it during Executor::run. state<T>() of a task may be used by that task while it runs.
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = delete;
  Graph& operator=(Graph&&) = delete;
  ~Graph() = default;

  /// Adds a stateless task that runs `fn` on `arena`. `name` is used by observers and errors.
  TaskHandle emplace(std::string name, Arena arena, TaskFunction fn);

  /// Adds a task with explicit state: `fn(State&, TaskContext&)` runs on `arena`; `initial` is
  /// moved into the graph and persists across runs.
  template <typename State, typename Fn>
  TaskHandle emplace_stateful(std::string name, Arena arena, State initial, Fn fn) {
    auto holder = std::make_unique<StateHolder<State>>(std::move(initial));
    State* state = &holder->value;
    TaskHandle handle = emplace(std::move(name), arena,
                                [state, fn = std::move(fn)](TaskContext& ctx) { fn(*state, ctx); });
    nodes_[handle.index()].state = std::move(holder);
    return handle;
  }

  /// The state of a task made by emplace_stateful<State>. Throws ContractError if the task has no
  /// state of that type.
  template <typename State>
  [[nodiscard]] State& state(TaskHandle task) {
    check_handle(task);
    auto* holder = dynamic_cast<StateHolder<State>*>(nodes_[task.index()].state.get());
    GRADMESH_CHECK(holder != nullptr,
                   "task '" + nodes_[task.index()].name + "' has no state of the requested type");
    return holder->value;
  }

  /// Adds the edge `before` -> `after`. Throws ContractError for foreign handles or a self-edge.
  void precede(TaskHandle before, TaskHandle after);

  [[nodiscard]] std::size_t size() const noexcept { return nodes_.size(); }
  [[nodiscard]] std::string_view name(std::size_t task) const { return nodes_.at(task).name; }
  [[nodiscard]] Arena arena(std::size_t task) const { return nodes_.at(task).arena; }
  [[nodiscard]] const std::vector<std::size_t>& successors(std::size_t task) const {
    return nodes_.at(task).successors;
  }
  /// Number of predecessors of each task, indexed by task.
  [[nodiscard]] std::vector<std::size_t> in_degrees() const;
  /// Throws ContractError naming a task on a cycle, if the graph has one.
  void check_acyclic() const;
  /// Runs the task's function (used by Executor).
  void invoke(std::size_t task, TaskContext& ctx) const { nodes_[task].fn(ctx); }
  /// How many runs of this graph have started (TaskContext::run() of the next run).
  [[nodiscard]] std::uint64_t runs() const noexcept { return runs_; }
  /// Changes whenever a task or an edge is added (the Executor re-checks the graph then).
  [[nodiscard]] std::uint64_t version() const noexcept { return version_; }

 private:
  struct StateBase {
    virtual ~StateBase() = default;
  };
  template <typename State>
  struct StateHolder final : StateBase {
    explicit StateHolder(State v) : value(std::move(v)) {}
    State value;
  };
  struct Node {
    std::string name;
    Arena arena;
    TaskFunction fn;
    std::unique_ptr<StateBase> state;
    std::vector<std::size_t> successors;
  };
  void check_handle(TaskHandle task) const;

  friend class Executor;
  std::vector<Node> nodes_;
  std::uint64_t runs_ = 0;
  std::uint64_t version_ = 0;
};

}  // namespace gradmesh::engine
