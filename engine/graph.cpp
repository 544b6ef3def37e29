#include "engine/graph.h"

#include <algorithm>

namespace gradmesh::engine {

const TaskHandle& TaskHandle::precede(TaskHandle next) const {
  GRADMESH_CHECK(graph_ != nullptr, "precede() on an empty TaskHandle");
  graph_->precede(*this, next);
  return *this;
}

const TaskHandle& TaskHandle::succeed(TaskHandle previous) const {
  GRADMESH_CHECK(graph_ != nullptr, "succeed() on an empty TaskHandle");
  graph_->precede(previous, *this);
  return *this;
}

std::string_view TaskHandle::name() const {
  GRADMESH_CHECK(graph_ != nullptr, "name() on an empty TaskHandle");
  return graph_->name(index_);
}

TaskHandle Graph::emplace(std::string name, Arena arena, TaskFunction fn) {
  GRADMESH_CHECK(static_cast<bool>(fn), "task '" + name + "' has no function");
  nodes_.push_back(Node{std::move(name), arena, std::move(fn), nullptr, {}});
  ++version_;
  return TaskHandle(this, nodes_.size() - 1);
}

void Graph::check_handle(TaskHandle task) const {
  GRADMESH_CHECK(task.graph_ == this, "TaskHandle belongs to another graph");
  GRADMESH_CHECK_LT(task.index_, nodes_.size(), "TaskHandle out of range");
}

void Graph::precede(TaskHandle before, TaskHandle after) {
  check_handle(before);
  check_handle(after);
  GRADMESH_CHECK(before.index() != after.index(),
                 "task '" + nodes_[before.index()].name + "' cannot precede itself");
  auto& succ = nodes_[before.index()].successors;
  if (std::find(succ.begin(), succ.end(), after.index()) == succ.end()) {
    succ.push_back(after.index());
    ++version_;
  }
}

std::vector<std::size_t> Graph::in_degrees() const {
  std::vector<std::size_t> degree(nodes_.size(), 0);
  for (const Node& node : nodes_) {
    for (std::size_t s : node.successors) ++degree[s];
  }
  return degree;
}

void Graph::check_acyclic() const {
  // Kahn's algorithm: whatever is never freed lies on (or behind) a cycle.
  std::vector<std::size_t> degree = in_degrees();
  std::vector<std::size_t> ready;
  for (std::size_t i = 0; i < degree.size(); ++i) {
    if (degree[i] == 0) ready.push_back(i);
  }
  std::size_t seen = 0;
  while (!ready.empty()) {
    std::size_t t = ready.back();
    ready.pop_back();
    ++seen;
    for (std::size_t s : nodes_[t].successors) {
      if (--degree[s] == 0) ready.push_back(s);
    }
  }
  if (seen == nodes_.size()) return;
  for (std::size_t i = 0; i < degree.size(); ++i) {
    if (degree[i] != 0) {
      throw ContractError("task graph has a cycle through task '" + nodes_[i].name + "'");
    }
  }
}

}  // namespace gradmesh::engine
