#include "sync/allreduce/allreduce_stage.h"

#include "sync/allreduce/messages.h"
#include "sync/layer_plan.h"

namespace gradmesh::sync {

AllReduceStage::AllReduceStage(SyncContext context, topo::Plan plan)
    : ctx_(std::move(context)),
      plan_(std::move(plan)),
      channel_(ctx_.transport, ctx_.rank, ctx_.nodes),
      stage_(channel_.route(allreduce::kStage, [this](std::size_t from, net::Message&& m) {
        on_message(from, std::move(m));
      })) {
  GRADMESH_CHECK_EQ(plan_.layers.size(), ctx_.model.num_layers(), "allreduce: plan size");
  std::vector<std::pair<std::size_t, std::size_t>> ranges;  // layers [first, last]
  if (ctx_.nodes > 1) {
    for (const topo::MergeGroup& g : plan_.groups) ranges.emplace_back(g.first, g.last);
  } else {
    for (std::size_t l = 0; l < ctx_.model.num_layers(); ++l) {
      if (ctx_.model.layer(l).parameter_count() > 0) ranges.emplace_back(l, l);
    }
  }
  for (const auto& [first, last] : ranges) {
    Bucket b;
    b.first = first;
    b.last = last;
    b.offset = ctx_.model.parameter_offset(first);
    b.floats = ctx_.model.parameter_offset(last + 1) - b.offset;
    if (b.floats == 0) continue;
    if (ctx_.nodes > 1) {
      b.ring = std::make_unique<RingAllReduce>(channel_, stage_,
                                               static_cast<std::uint32_t>(buckets_.size()), b.floats);
    }
    buckets_.push_back(std::move(b));
  }
  channel_.on_failure([this](const PeerError& error) {
    const auto e = std::make_exception_ptr(error);
    for (Bucket& b : buckets_) {
      if (b.ring) b.ring->fail_all(e);
    }
  });
}

void AllReduceStage::build(engine::Graph& graph, const IterationTasks& tasks) {
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    const std::string suffix = "_" + std::to_string(i);
    auto apply_task = graph.emplace("ar_apply" + suffix, engine::Arena::kNetwork,
                                    [this, &b](engine::TaskContext& t) { apply(b, t.run()); });
    if (b.ring) {
      auto start = graph.emplace("ar_start" + suffix, engine::Arena::kNetwork,
                                 [this, &b](engine::TaskContext& t) {
                                   b.ring->start(t.run(),
                                                 ctx_.model.gradients().subspan(b.offset, b.floats));
                                 });
      auto wait = graph.emplace("ar_wait" + suffix, engine::Arena::kNetwork,
                                [&b](engine::TaskContext& t) { b.ring->await(t.run(), t.defer()); });
      for (std::size_t l = b.first; l <= b.last; ++l) tasks.backward[l].precede(start);
      start.precede(wait);
      wait.precede(apply_task);
    } else {
      for (std::size_t l = b.first; l <= b.last; ++l) tasks.backward[l].precede(apply_task);
    }
    apply_task.precede(tasks.done);
  }
}

void AllReduceStage::apply(const Bucket& bucket, std::uint64_t round) {
  if (!bucket.ring) {
    for (std::size_t l = bucket.first; l <= bucket.last; ++l) {
      ctx_.optimizer.step(ctx_.model.parameter_offset(l), ctx_.model.layer_parameters(l),
                          ctx_.model.layer_gradients(l));
    }
    return;
  }
  // The mean over the n nodes' batches; the gradient buffer (no longer sent) takes it.
  const std::span<const float> sum = bucket.ring->result(round);
  const float scale = 1.0f / static_cast<float>(ctx_.nodes);
  for (std::size_t l = bucket.first; l <= bucket.last; ++l) {
    const std::size_t offset = ctx_.model.parameter_offset(l);
    const std::span<float> params = ctx_.model.layer_parameters(l);
    if (params.empty()) continue;
    const std::span<const float> grads[1] = {sum.subspan(offset - bucket.offset, params.size())};
    ctx_.optimizer.step_sum(offset, params, grads, scale, ctx_.model.layer_gradients(l));
  }
}

void AllReduceStage::on_message(std::size_t from, net::Message&& message) {
  const std::uint64_t bucket = message.key >> 32;
  if (bucket >= buckets_.size() || !buckets_[bucket].ring) {
    channel_.reject(from, stage_, "unknown bucket " + std::to_string(bucket));
    return;
  }
  buckets_[bucket].ring->on_message(from, std::move(message));
}

std::vector<LayerPlan> AllReduceStage::plan() const {
  std::vector<LayerPlan> rows;
  for (std::size_t l = 0; l < ctx_.model.num_layers(); ++l) {
    LayerPlan row = describe_layer(ctx_.model, l, ctx_.nodes > 1 ? "allreduce" : "local");
    if (row.parameters > 0 && ctx_.nodes > 1) {
      row.predicted_bytes_sent = plan_.layers[l].bytes_sent;
      if (plan_.layers[l].group) row.scheme += " b" + std::to_string(*plan_.layers[l].group);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::map<std::string, double> AllReduceStage::summary() const {
  return {{"buckets", static_cast<double>(buckets_.size())},
          {"predicted_bytes_sent", ctx_.nodes > 1 ? plan_.bytes_sent : 0.0},
          {"predicted_iteration_seconds", plan_.iteration_seconds},
          {"alpha", plan_.link.alpha},
          {"bandwidth", plan_.link.bandwidth}};
}

}  // namespace gradmesh::sync
