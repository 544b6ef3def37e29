#include "tests/sync/support/inproc_cluster.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <random>
#include <thread>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "sync/lane_router.h"
#include "tasks/layers/layer_spec.h"

namespace gradmesh::testing {

namespace {
constexpr std::size_t kClasses = 4;  // the last dense layer of SyntheticJob's default
}

void synthetic_batch(const SyntheticJob& job, std::size_t classes, std::size_t rank,
                     std::uint64_t iteration, std::size_t batch, std::span<float> x,
                     std::span<std::int32_t> y) {
  std::mt19937_64 rng(job.seed * 1000003u + rank * 7919u + iteration * 104729u);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (std::size_t i = 0; i < batch; ++i) {
    for (std::size_t f = 0; f < job.features; ++f) x[i * job.features + f] = value(rng);
    y[i] = static_cast<std::int32_t>(rng() % classes);
  }
}

InProcNode::InProcNode(const SyntheticJob& job, std::string strategy, std::size_t rank,
                       std::size_t nodes, net::Transport* transport,
                       std::vector<std::size_t> data_ranks)
    : job_(job),
      data_ranks_(std::move(data_ranks)),
      batch_(job.batch * data_ranks_.size()),
      model_(tasks::parse_layer_specs(job.layers), job.features, batch_, job.seed,
             job.backend ? job.backend() : nullptr),
      optimizer_(job.sgd, model_.parameter_count(), job.adam),
      executor_({1, 1}),
      router_(transport, rank, nodes),
      labels_(batch_) {
  sync::SyncContext context{model_, executor_,  router_,     rank, nodes,
                            batch_, optimizer_, job.options, 0,    job.measured};
  context.min_nodes = job.min_nodes;
  stage_ = job.factory ? job.factory(std::move(context))
                       : sync::make_sync_stage(strategy, std::move(context));
  const std::size_t layers = model_.num_layers();
  auto load = graph_.emplace("load", engine::Arena::kCompute, [this](engine::TaskContext& ctx) {
    const std::span<float> x = model_.input(batch_);
    for (std::size_t i = 0; i < data_ranks_.size(); ++i) {
      synthetic_batch(job_, kClasses, data_ranks_[i], job_.first_iteration + ctx.run(), job_.batch,
                      x.subspan(i * job_.batch * job_.features, job_.batch * job_.features),
                      std::span<std::int32_t>(labels_).subspan(i * job_.batch, job_.batch));
    }
  });
  sync::IterationTasks tasks;
  engine::TaskHandle previous = load;
  for (std::size_t l = 0; l < layers; ++l) {
    auto forward =
        graph_.emplace("forward_" + std::to_string(l), engine::Arena::kCompute,
                       [this, l](engine::TaskContext&) { model_.forward_layer(l, batch_); });
    previous.precede(forward);
    tasks.forward.push_back(forward);
    previous = forward;
  }
  auto loss = graph_.emplace("loss", engine::Arena::kCompute, [this](engine::TaskContext&) {
    loss_ = model_.loss_backward(labels_);
  });
  previous.precede(loss);
  previous = loss;
  tasks.backward.resize(layers);
  for (std::size_t l = layers; l-- > 0;) {
    auto backward =
        graph_.emplace("backward_" + std::to_string(l), engine::Arena::kCompute,
                       [this, l](engine::TaskContext&) { model_.backward_layer(l, batch_); });
    previous.precede(backward);
    tasks.backward[l] = backward;
    previous = backward;
  }
  tasks.done = graph_.emplace("done", engine::Arena::kCompute, [](engine::TaskContext&) {});
  previous.precede(tasks.done);
  stage_->build(graph_, tasks);
}

InProcNode::~InProcNode() { executor_.wait_idle(); }

float InProcNode::step() {
  optimizer_.set_step(job_.first_iteration + ++steps_);  // Adam's t, as the training loop sets it
  executor_.run(graph_);
  return loss_;
}

InProcCluster::InProcCluster(const SyntheticJob& job, const std::string& strategy,
                             std::size_t nodes)
    : transports_(net::make_inproc_mesh(nodes, sync::lane_names())) {
  for (std::size_t r = 0; r < nodes; ++r) {
    nodes_.push_back(std::make_unique<InProcNode>(job, strategy, r, nodes, transports_[r].get(),
                                                  std::vector<std::size_t>{r}));
  }
  for (auto& t : transports_) t->start();
}

InProcCluster::~InProcCluster() {
  // As the node does: stop delivery before the stages go, then let queued jobs drain.
  for (auto& t : transports_) t->close();
  nodes_.clear();
}

void InProcCluster::train(std::uint64_t iterations) {
  (void)train_each(std::vector<std::uint64_t>(nodes_.size(), iterations));
}

std::vector<std::uint64_t> InProcCluster::train_each(const std::vector<std::uint64_t>& iterations,
                                                     bool finish) {
  GRADMESH_CHECK_EQ(iterations.size(), nodes_.size(), "train_each: one count a node");
  std::vector<std::uint64_t> ran(nodes_.size(), 0);
  std::vector<std::exception_ptr> errors(nodes_.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < nodes_.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        for (; ran[r] < iterations[r] && !nodes_[r]->stage().ended(); ++ran[r]) nodes_[r]->step();
        if (finish) (void)nodes_[r]->stage().finish();
      } catch (const std::exception& e) {
        errors[r] = std::current_exception();
        transports_[r]->abort(e.what());  // as the node does: peers learn the root cause
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return ran;
}

void InProcCluster::finish() {
  std::vector<std::thread> threads;
  for (auto& node : nodes_) threads.emplace_back([&node] { node->stage().finish(); });
  for (auto& t : threads) t.join();
}

std::vector<float> union_reference(SyntheticJob job, std::size_t nodes, std::uint64_t iterations) {
  job.factory = nullptr;
  job.options = {};
  std::vector<std::size_t> all(nodes);
  for (std::size_t r = 0; r < nodes; ++r) all[r] = r;
  InProcNode single(job, "none", 0, 1, nullptr, all);
  for (std::uint64_t i = 0; i < iterations; ++i) single.step();
  const auto p = single.model().parameters();
  return {p.begin(), p.end()};
}

std::vector<std::vector<float>> replicas(InProcCluster& cluster) {
  std::vector<std::vector<float>> out;
  for (std::size_t r = 0; r < cluster.size(); ++r) {
    const auto p = cluster.node(r).model().parameters();
    out.emplace_back(p.begin(), p.end());
  }
  return out;
}

std::vector<float> train_alone(const SyntheticJob& job, std::size_t rank,
                               const std::vector<float>& start, std::vector<float>& velocity,
                               std::uint64_t first, std::uint64_t iterations) {
  SyntheticJob alone = job;
  alone.options = {};
  alone.first_iteration = first;
  InProcNode node(alone, "none", 0, 1, nullptr, {rank});
  std::copy(start.begin(), start.end(), node.model().parameters().begin());
  if (!velocity.empty()) {
    std::copy(velocity.begin(), velocity.end(), node.optimizer().velocity().begin());
  }
  for (std::uint64_t t = 0; t < iterations; ++t) node.step();
  const auto v = node.optimizer().velocity();
  velocity.assign(v.begin(), v.end());
  const auto w = node.model().parameters();
  return {w.begin(), w.end()};
}

std::vector<std::vector<std::byte>> save_nodes(InProcCluster& cluster) {
  std::vector<std::vector<std::byte>> saved(cluster.size());
  for (std::size_t r = 0; r < cluster.size(); ++r) {
    engine::StateWriter writer;
    cluster.node(r).model().save_state(writer);
    cluster.node(r).optimizer().save_state(writer);
    cluster.node(r).stage().save_state(writer);
    saved[r].assign(writer.bytes().begin(), writer.bytes().end());
  }
  return saved;
}

void load_nodes(InProcCluster& cluster, const std::vector<std::vector<std::byte>>& saved) {
  GRADMESH_CHECK_EQ(saved.size(), cluster.size(), "load_nodes: node count");
  for (std::size_t r = 0; r < cluster.size(); ++r) {
    engine::StateReader reader(saved[r], "node");
    cluster.node(r).model().load_state(reader);
    cluster.node(r).optimizer().load_state(reader);
    cluster.node(r).stage().load_state(reader);
  }
}

std::vector<std::vector<float>> resumed_replicas(const SyntheticJob& job,
                                                 const std::string& strategy, std::size_t nodes,
                                                 std::size_t stop, std::size_t total, bool finish,
                                                 std::vector<std::vector<std::byte>>* saved) {
  std::vector<std::vector<std::byte>> states;
  {
    InProcCluster first(job, strategy, nodes);
    first.train(stop);
    states = save_nodes(first);
  }
  SyntheticJob resumed_job = job;
  resumed_job.first_iteration = stop;
  InProcCluster resumed(resumed_job, strategy, nodes);
  load_nodes(resumed, states);
  resumed.train(total - stop);
  if (finish) resumed.finish();
  if (saved != nullptr) *saved = std::move(states);
  return replicas(resumed);
}

double max_abs_difference(std::span<const float> a, std::span<const float> b) {
  GRADMESH_CHECK_EQ(a.size(), b.size(), "max_abs_difference: sizes");
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  return worst;
}

}  // namespace gradmesh::testing
