#include "sync/compress/powersgd/powersgd_scheme.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "sync/compress/powersgd/powersgd_model.h"
#include "tasks/layers/weighted_layer.h"
#include "tasks/random.h"
#include "topo/cost_model.h"

namespace gradmesh::sync {

namespace {

/// Q's first draw: the same on every node (P = M Q sums over the nodes only with one Q), distinct
/// per layer.
constexpr std::uint64_t kQSeed = 0x5057'5347'4451'0001ULL;

/// Ring ids on the lane: three per layer of the scheme.
enum Ring : std::uint32_t { kRingP = 0, kRingQ = 1, kRingFull = 2, kRings = 3 };

}  // namespace

PowerSgdScheme::PowerSgdScheme(const SyncContext& ctx, LaneRouter& router,
                               const std::vector<std::size_t>& layers,
                               const CompressionOptions& options)
    : ctx_(ctx),
      router_(router),
      lane_(router.route(
          kPowerSgdLane,
          [this](std::size_t from, net::Message&& m) { on_message(from, std::move(m)); })),
      options_(options) {
  if (ctx_.model.on_device()) {
    throw ConfigError(
        "sync.compression.method = \"powersgd\" runs its GEMMs on the host: the model's "
        "gradients must be in host memory (compute.device = \"cpu\")");
  }
  const auto rank = static_cast<std::size_t>(std::max<std::int64_t>(1, options_.rank));
  for (const std::size_t l : layers) {
    const auto* weighted = dynamic_cast<const tasks::WeightedLayer*>(&ctx_.model.layer(l));
    GRADMESH_CHECK(weighted != nullptr && weighted->bias_count() > 0 &&
                       weighted->weight_count() % weighted->bias_count() == 0,
                   "PowerSgdScheme: layer " + std::to_string(l) +
                       " is not a weight matrix with one bias a row");
    const std::size_t rows = weighted->bias_count();
    const std::size_t cols = weighted->weight_count() / rows;
    auto layer = std::make_unique<Layer>(rows, cols, rank, tasks::derive_seed(kQSeed, l));
    layer->index = l;
    layer->name = ctx_.model.layer_name(l);
    layer->offset = ctx_.model.parameter_offset(l);
    const std::size_t r = layer->psgd.rank();
    layer->p_send.resize(rows * r + rows);
    layer->p_hat.resize(rows * r);
    layer->q_send.resize(cols * r);
    const auto id = static_cast<std::uint32_t>(layers_.size() * kRings);
    const auto priority = static_cast<std::uint32_t>(l);
    layer->ring_p = std::make_unique<collective::RingAllReduce>(router_, lane_, id + kRingP,
                                                                layer->p_send.size(), priority);
    layer->ring_q = std::make_unique<collective::RingAllReduce>(router_, lane_, id + kRingQ,
                                                                layer->q_send.size(), priority);
    if (options_.start_iteration > 0) {
      layer->ring_full = std::make_unique<collective::RingAllReduce>(router_, lane_, id + kRingFull,
                                                                     rows * cols + rows, priority);
    }
    layers_.push_back(std::move(layer));
  }
}

const PowerSgdScheme::Layer* PowerSgdScheme::find(std::size_t layer) const noexcept {
  for (const auto& l : layers_) {
    if (l->index == layer) return l.get();
  }
  return nullptr;
}

double PowerSgdScheme::bytes_sent(std::size_t layer) const {
  const Layer* l = find(layer);
  if (l == nullptr) return 0;
  const std::size_t n = router_.nodes();
  const double overhead =
      frame_overhead_bytes(lane_, static_cast<std::uint16_t>(collective::RingKind::kReduceScatter));
  return topo::ring_allreduce_bytes(4.0 * static_cast<double>(l->p_send.size()), n, overhead) +
         topo::ring_allreduce_bytes(4.0 * static_cast<double>(l->q_send.size()), n, overhead);
}

std::string PowerSgdScheme::describe(std::size_t layer) const {
  const Layer* l = find(layer);
  return "PowerSGD r" + std::to_string(l != nullptr ? l->psgd.rank() : 0);
}

void PowerSgdScheme::build(engine::Graph& graph, const IterationTasks& tasks) {
  for (auto& owned : layers_) {
    Layer& layer = *owned;
    const std::string suffix = "_" + std::to_string(layer.index);
    auto p = graph.emplace("psgd_p" + suffix, engine::Arena::kNetwork,
                           [this, &layer](engine::TaskContext&) { start_p(layer); });
    auto wait_p = graph.emplace(
        "psgd_wait_p" + suffix, engine::Arena::kNetwork, [&layer](engine::TaskContext& t) {
          (layer.warm ? layer.ring_full : layer.ring_p)->await(layer.round, t.defer());
        });
    auto q = graph.emplace("psgd_q" + suffix, engine::Arena::kNetwork,
                           [this, &layer](engine::TaskContext&) { start_q(layer); });
    auto wait_q = graph.emplace("psgd_wait_q" + suffix, engine::Arena::kNetwork,
                                [&layer](engine::TaskContext& t) {
                                  if (!layer.warm) layer.ring_q->await(layer.round, t.defer());
                                });
    auto step = graph.emplace("psgd_apply" + suffix, engine::Arena::kNetwork,
                              [this, &layer](engine::TaskContext&) { apply(layer); });
    tasks.backward[layer.index].precede(p);
    p.precede(wait_p);
    wait_p.precede(q);
    q.precede(wait_q);
    wait_q.precede(step);
    step.precede(tasks.done);
  }
}

void PowerSgdScheme::start_p(Layer& layer) {
  layer.warm = layer.done < static_cast<std::uint64_t>(options_.start_iteration);
  layer.round = layer.warm ? layer.full_rounds++ : layer.compressed_rounds++;
  const std::span<float> gradients = ctx_.model.layer_gradients(layer.index);
  if (layer.warm) {  // the whole layer, reduced in place, as the allreduce scheme does
    layer.ring_full->start(layer.round, gradients);
    return;
  }
  const std::size_t weights = layer.rows * layer.cols;
  const std::size_t pr = layer.p_hat.size();
  layer.psgd.compute_p(gradients.first(weights), std::span<float>(layer.p_send).first(pr));
  std::copy(gradients.begin() + static_cast<std::ptrdiff_t>(weights), gradients.end(),
            layer.p_send.begin() + static_cast<std::ptrdiff_t>(pr));
  layer.ring_p->start(layer.round, layer.p_send);
}

void PowerSgdScheme::start_q(Layer& layer) {
  if (layer.warm) return;
  const std::span<const float> sum = layer.ring_p->result(layer.round);
  std::copy_n(sum.begin(), layer.p_hat.size(), layer.p_hat.begin());
  layer.psgd.compute_q(layer.p_hat, layer.q_send);
  layer.ring_q->start(layer.round, layer.q_send);
}

void PowerSgdScheme::apply(Layer& layer) {
  const std::uint64_t round = layer.round;
  const std::span<float> params = ctx_.model.layer_parameters(layer.index);
  // The gradient buffer (sent or compressed already) is the optimizer's scratch.
  const std::span<float> scratch = ctx_.model.layer_gradients(layer.index);
  const float mean = 1.0f / static_cast<float>(ctx_.nodes);
  ++layer.done;
  if (layer.warm) {
    const std::span<const float> grads[1] = {layer.ring_full->result(round)};
    ctx_.optimizer.step_sum(layer.offset, params, grads, mean, scratch);
    return;
  }
  const std::size_t weights = layer.rows * layer.cols;
  // The mean gradient's approximation is stepped a block of rows at a time, as PowerSgd forms it
  // (in cache): never written out whole and read back.
  layer.psgd.decompress_each(layer.p_hat, layer.ring_q->result(round), ctx_.nodes,
                             [&](std::size_t row, std::span<const float> block) {
                               ctx_.optimizer.step(layer.offset + row * layer.cols,
                                                   params.subspan(row * layer.cols, block.size()),
                                                   block);
                             });
  const std::span<const float> b_grads[1] = {
      layer.ring_p->result(round).subspan(layer.p_hat.size())};
  ctx_.optimizer.step_sum(layer.offset + weights, params.subspan(weights), b_grads, mean,
                          scratch.subspan(weights));
  const compress::PowerSgd::Norms& norms = layer.psgd.last_norms();
  const std::lock_guard lock(figures_mutex_);
  layer.figures.add(norms.input2, norms.projection_error2,
                    layer.psgd.error_feedback() ? norms.error2 : -1.0, norms.gradient2);
}

void PowerSgdScheme::epoch_figures(std::map<std::string, double>& out) {
  const std::lock_guard lock(figures_mutex_);
  for (auto& layer : layers_) layer->figures.flush(layer->name, out);
}

void PowerSgdScheme::fail_all(std::exception_ptr error) {
  for (auto& layer : layers_) {
    layer->ring_p->fail_all(error);
    layer->ring_q->fail_all(error);
    if (layer->ring_full) layer->ring_full->fail_all(error);
  }
}

void PowerSgdScheme::on_message(std::size_t from, net::Message&& message) {
  const std::uint64_t id = message.key >> 32;
  const std::uint64_t index = id / kRings;
  if (index >= layers_.size()) {
    router_.reject(from, lane_, "unknown PowerSGD ring " + std::to_string(id));
    return;
  }
  Layer& layer = *layers_[index];
  switch (static_cast<Ring>(id % kRings)) {
    case kRingP:
      layer.ring_p->on_message(from, std::move(message));
      return;
    case kRingQ:
      layer.ring_q->on_message(from, std::move(message));
      return;
    default:
      if (layer.ring_full) {
        layer.ring_full->on_message(from, std::move(message));
      } else {
        router_.reject(from, lane_, "PowerSGD ring " + std::to_string(id) + " (no warm-up)");
      }
  }
}

void PowerSgdScheme::save_state(engine::StateWriter& out) {
  for (auto& layer : layers_) {
    out.write_u64(layer->done);
    layer->psgd.save_state(out);
  }
}

void PowerSgdScheme::load_state(engine::StateReader& in) {
  for (auto& layer : layers_) {
    layer->done = in.read_u64();
    layer->psgd.load_state(in);
  }
}

}  // namespace gradmesh::sync
