#include "sync/compress/sparse_scheme.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "engine/error.h"
#include "sync/compress/sparse_model.h"
#include "tasks/random.h"
#include "topo/cost_model.h"

namespace gradmesh::sync {

namespace {

/// Random-k's index streams (randomk_seed).
constexpr std::uint64_t kRandomKSeed = 0x5250'4b53'4545'4401ULL;

/// Ring ids on the lane: two per layer (random-k's values, the warm-up's whole layer).
enum Ring : std::uint32_t { kRingValues = 0, kRingFull = 1, kRings = 2 };

/// Message::kind of layer slot s's gather: kGatherKind + s (the ring's kinds are below).
constexpr std::uint32_t kGatherKind = 16;
constexpr std::size_t kMaxLayers = UINT16_MAX - kGatherKind;

}  // namespace

std::uint64_t randomk_seed(std::size_t layer) noexcept {
  return tasks::derive_seed(kRandomKSeed, layer);
}

SparseScheme::SparseScheme(const SyncContext& ctx, LaneRouter& router,
                           const std::vector<std::size_t>& layers, std::string_view method,
                           const CompressionOptions& options)
    : ctx_(ctx),
      router_(router),
      entry_(compress::compressor_entry(method, "sync.compression.method")),
      lane_(router.route(
          gathered_lane(entry_),
          [this](std::size_t from, net::Message&& m) { on_message(from, std::move(m)); })),
      options_(options),
      // DGC's correction is SGD's momentum moved before the codec: none under Adam, whose
      // moments the optimizer keeps (its step runs on the decoded mean as on any gradient), and
      // none for a dense compressor, whose masking would zero the whole velocity every step.
      momentum_correction_(options.momentum_correction && !ctx.optimizer.adam() &&
                           ctx.optimizer.options().momentum > 0.0f &&
                           !compress::compressor_entry(method).traits.dense) {
  GRADMESH_CHECK(!entry_.traits.lossless,
                 "SparseScheme: " + entry_.name + " compresses nothing (a plain scheme sends it)");
  GRADMESH_CHECK(layers.size() <= kMaxLayers,
                 "SparseScheme: at most " + std::to_string(kMaxLayers) + " layers");
  // On a device the codec runs there (DeviceCodec) unless DGC's correction needs the velocity,
  // which the optimizer keeps in host memory: then the host copy of the gradient is encoded.
  on_device_ = ctx_.model.on_device() && !momentum_correction_ &&
               compress::DeviceCodec::supports(entry_.name);
  const float momentum = ctx_.optimizer.options().momentum;
  if (!layers.empty() && momentum > 0.0f && !ctx_.optimizer.adam() && !entry_.traits.dense &&
      (!momentum_correction_ || entry_.traits.shared_indices)) {
    // Measured (docs/compression.md), demo MLP, 4 nodes, ratio 1%, momentum 0.9: random-k
    // diverged without the correction (loss 566 after one epoch, 1.6e20 after two) and with it
    // (9.4-9.9% after 2 epochs, 3 seeds): each coordinate goes out about every 1 / ratio
    // iterations, its release then a step of that many iterations' velocity. With momentum 0 it
    // reached 84.7% in 2 epochs.
    spdlog::warn(
        "sync.compression.method = \"{}\" on {} layer(s) with optimizer.momentum = {}{}: error "
        "feedback with momentum can diverge (random-k at 1% with momentum 0.9 did on the demo "
        "MLP, with and without DGC's momentum correction); optimizer.momentum = 0 trains "
        "(docs/compression.md)",
        entry_.name, layers.size(), momentum,
        momentum_correction_ ? "" : " and sync.compression.momentum_correction = false");
  }
  for (const std::size_t l : layers) {
    const std::size_t floats = ctx_.model.layer_gradients(l).size();
    const compress::CompressorParams params =
        compressor_params(options_, randomk_seed(l), ctx_.rank);
    auto layer = std::make_unique<Layer>(entry_.name, floats, params, !on_device_);
    if (on_device_) {
      layer->device_codec = std::make_unique<compress::DeviceCodec>(
          ctx_.model.backend(), entry_.name, floats, params, true);
    }
    layer->index = l;
    layer->name = ctx_.model.layer_name(l);
    layer->offset = ctx_.model.parameter_offset(l);
    if (momentum_correction_) {  // DGC: this node's own velocity, in the optimizer's slice
      layer->codec.correct_momentum(ctx_.optimizer.options().momentum,
                                    ctx_.optimizer.velocity().subspan(layer->offset, floats));
    }
    const auto slot = static_cast<std::uint32_t>(layers_.size());
    const auto priority = static_cast<std::uint32_t>(l);
    const std::size_t bytes = layer->codec.encoded_bytes();
    if (!entry_.traits.shared_indices) {
      for (auto& buffer : layer->sent) buffer.resize(bytes);
      layer->gather = std::make_unique<collective::AllGather>(
          router_, lane_, static_cast<std::uint16_t>(kGatherKind + slot), bytes, 4, priority);
    } else {
      layer->values.resize(layer->codec.kept());
      layer->ring = std::make_unique<collective::RingAllReduce>(
          router_, lane_, slot * kRings + kRingValues, layer->values.size(), priority);
    }
    if (options_.start_iteration > 0) {
      layer->ring_full = std::make_unique<collective::RingAllReduce>(
          router_, lane_, slot * kRings + kRingFull, floats, priority);
    }
    layers_.push_back(std::move(layer));
  }
}

const SparseScheme::Layer* SparseScheme::find(std::size_t layer) const noexcept {
  for (const auto& l : layers_) {
    if (l->index == layer) return l.get();
  }
  return nullptr;
}

double SparseScheme::bytes_sent(std::size_t layer) const {
  const Layer* l = find(layer);
  if (l == nullptr) return 0;
  const std::size_t n = router_.nodes();
  const auto bytes = static_cast<double>(l->codec.encoded_bytes());
  if (l->gather) {
    return static_cast<double>(n - 1) * (bytes + frame_overhead_bytes(lane_, kGatherKind, false));
  }
  const double overhead =
      frame_overhead_bytes(lane_, static_cast<std::uint16_t>(collective::RingKind::kReduceScatter));
  return topo::ring_allreduce_bytes(bytes, n, overhead);
}

std::string SparseScheme::describe(std::size_t layer) const {
  (void)layer;
  return compress::describe_compressor(entry_, compressor_params(options_, 0, ctx_.rank));
}

void SparseScheme::build(engine::Graph& graph, const IterationTasks& tasks) {
  for (auto& owned : layers_) {
    Layer& layer = *owned;
    const std::string suffix = "_" + std::to_string(layer.index);
    // The device codec uses the Model's device stream: on the Model's thread (as SFB's tasks).
    const engine::Arena arena = on_device_ ? engine::Arena::kCompute : engine::Arena::kNetwork;
    auto encode_task = graph.emplace("sparse_encode" + suffix, arena,
                                     [this, &layer](engine::TaskContext&) { encode(layer); });
    auto wait_task = graph.emplace("sparse_wait" + suffix, engine::Arena::kNetwork,
                                   [this, &layer](engine::TaskContext& t) { await(layer, t); });
    auto apply_task = graph.emplace("sparse_apply" + suffix, engine::Arena::kNetwork,
                                    [this, &layer](engine::TaskContext&) { apply(layer); });
    tasks.backward[layer.index].precede(encode_task);
    encode_task.precede(wait_task);
    wait_task.precede(apply_task);
    apply_task.precede(tasks.done);
  }
}

void SparseScheme::encode(Layer& layer) {
  layer.warm = layer.done < static_cast<std::uint64_t>(options_.start_iteration);
  layer.round = layer.warm ? layer.full_rounds++ : layer.compressed_rounds++;
  const std::span<float> gradients = ctx_.model.layer_gradients(layer.index);
  if (layer.warm) {  // the whole layer, reduced in place, as the allreduce scheme does
    layer.ring_full->start(layer.round, gradients);
    return;
  }
  const std::span<std::byte> out = layer.gather
                                       ? std::span<std::byte>(layer.sent[layer.round % 2])
                                       : std::as_writable_bytes(std::span<float>(layer.values));
  if (momentum_correction_) {  // DGC eq. 5's g + wd w; the codec's wrapper adds it into u
    const std::span<const float> w = ctx_.model.layer_parameters(layer.index);
    ctx_.optimizer.for_each_decay_segment(layer.offset, gradients.size(),
                                          [&](std::size_t b, std::size_t e, float decay) {
                                            if (decay == 0.0f) return;
                                            for (std::size_t i = b; i < e; ++i)
                                              gradients[i] += decay * w[i];
                                          });
  }
  const compress::EncodeStats stats =
      layer.device_codec
          ? layer.device_codec->encode(ctx_.model.device_layer_gradients(layer.index).data(), out,
                                       layer.done)
          : layer.codec.encode(gradients, out, layer.done);
  {  // with error feedback the residual is the compression error
    const std::lock_guard lock(figures_mutex_);
    layer.figures.add(stats.input_norm2, stats.error_norm2, stats.error_norm2,
                      stats.gradient_norm2);
  }
  if (layer.gather) {
    layer.gather->start(layer.round, net::Payload::view(out));
  } else {
    layer.ring->start(layer.round, layer.values);
  }
}

void SparseScheme::await(Layer& layer, engine::TaskContext& task) {
  if (layer.warm) {
    layer.ring_full->await(layer.round, task.defer());
  } else if (layer.gather) {
    layer.gather->await(layer.round, task.defer());
  } else {
    layer.ring->await(layer.round, task.defer());
  }
}

void SparseScheme::apply(Layer& layer) {
  const std::uint64_t round = layer.round;
  const std::uint64_t iteration = layer.done++;
  const std::span<float> params = ctx_.model.layer_parameters(layer.index);
  // The gradient buffer (sent or encoded already) holds the mean update, then is the step's input.
  const std::span<float> update = ctx_.model.layer_gradients(layer.index);
  const float mean = 1.0f / static_cast<float>(ctx_.nodes);
  if (layer.warm) {
    const std::span<const float> grads[1] = {layer.ring_full->result(round)};
    ctx_.optimizer.step_sum(layer.offset, params, grads, mean, update);
    return;
  }
  if (layer.gather) {
    // Checked on arrival (on_message): every payload decodes.
    const std::vector<net::Payload> payloads = layer.gather->take(round);
    std::fill(update.begin(), update.end(), 0.0f);
    for (const net::Payload& p : payloads) layer.codec.decode_add(p.bytes(), update, iteration);
    for (float& u : update) u *= mean;
  } else {
    // The k sums scaled before they are scattered (the ring's input is free again): no pass over
    // the layer's n floats but the decode's.
    const std::span<const float> sum = layer.ring->result(round);
    for (std::size_t j = 0; j < sum.size(); ++j) layer.values[j] = sum[j] * mean;
    layer.codec.decode(std::as_bytes(std::span<const float>(layer.values)), update, iteration);
  }
  if (momentum_correction_) {  // the momentum and the decay are in what was sent (DGC)
    const float lr = ctx_.optimizer.lr();
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= lr * update[i];
    return;
  }
  ctx_.optimizer.step(layer.offset, params, update);
}

void SparseScheme::epoch_figures(std::map<std::string, double>& out) {
  const std::lock_guard lock(figures_mutex_);
  for (auto& layer : layers_) layer->figures.flush(layer->name, out);
}

void SparseScheme::fail_all(std::exception_ptr error) {
  for (auto& layer : layers_) {
    if (layer->ring) layer->ring->fail_all(error);
    if (layer->ring_full) layer->ring_full->fail_all(error);
  }
  // The gathers keep a PeerError (what fail_all() is given: the Scheme interface).
  try {
    std::rethrow_exception(error);
  } catch (const PeerError& e) {
    for (auto& layer : layers_) {
      if (layer->gather) layer->gather->fail(e);
    }
  } catch (const std::exception& e) {
    const PeerError stopped(router_.rank(), router_.address(router_.rank()),
                            std::string("stopped: ") + e.what());
    for (auto& layer : layers_) {
      if (layer->gather) layer->gather->fail(stopped);
    }
  }
}

void SparseScheme::on_message(std::size_t from, net::Message&& message) {
  const auto kind = static_cast<std::uint32_t>(message.kind);
  if (kind >= kGatherKind) {
    const std::size_t slot = kind - kGatherKind;
    if (slot >= layers_.size() || !layers_[slot]->gather) {
      router_.reject(from, lane_, "unknown " + entry_.name + " gather " + std::to_string(slot));
      return;
    }
    Layer& layer = *layers_[slot];
    try {
      layer.codec.check(message.payload.bytes());
    } catch (const ProtocolError& e) {
      router_.reject(from, lane_, std::string("layer ") + layer.name + ": " + e.what());
      return;
    }
    layer.gather->on_message(from, std::move(message));
    return;
  }
  const std::uint64_t id = message.key >> 32;
  const std::uint64_t slot = id / kRings;
  if (slot >= layers_.size()) {
    router_.reject(from, lane_, "unknown sparse ring " + std::to_string(id));
    return;
  }
  Layer& layer = *layers_[slot];
  collective::RingAllReduce* ring =
      id % kRings == kRingValues ? layer.ring.get() : layer.ring_full.get();
  if (ring == nullptr) {
    router_.reject(
        from, lane_,
        "sparse ring " + std::to_string(id) + " (no such ring in layer " + layer.name + ")");
    return;
  }
  ring->on_message(from, std::move(message));
}

void SparseScheme::save_state(engine::StateWriter& out) {
  for (auto& layer : layers_) {
    out.write_u64(layer->done);
    layer->residual_owner().save_state(out);
  }
}

void SparseScheme::load_state(engine::StateReader& in) {
  for (auto& layer : layers_) {
    layer->done = in.read_u64();
    layer->residual_owner().load_state(in);
  }
}

}  // namespace gradmesh::sync
