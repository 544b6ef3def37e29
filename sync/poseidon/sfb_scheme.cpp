#include "sync/poseidon/sfb_scheme.h"

#include "engine/error.h"
#include "sync/compress/compressor.h"
#include "sync/poseidon/messages.h"
#include "topo/planner.h"

namespace gradmesh::sync {

namespace {
constexpr auto kFactors = static_cast<std::uint16_t>(sfb::Kind::kSufficientFactors);
}

std::string sfb_segment_scheme_id(std::string_view method) {
  return compress::compressed_scheme_id(topo::kSfbScheme, method);
}

topo::SchemeModel sfb_segment_scheme_model(std::string_view method) {
  const collective::SegmentCodec& segment =
      compress::segment_format(method, "sfb_segment_scheme_model");
  // Each node's message: U's segment then V's, each the format's header and its bytes a float.
  const topo::FactorWire wire{
      static_cast<double>(segment.encoded_bytes(1) - segment.encoded_bytes(0)),
      2.0 * static_cast<double>(segment.encoded_bytes(0))};
  topo::SchemeModel m = topo::sfb_scheme_model();
  m.compressed = true;
  m.id = sfb_segment_scheme_id(method);
  m.cost = [wire](const topo::SchemeCostInput& in, const topo::LayerProfile& layer) {
    return topo::sfb_cost(in.cluster, in.batch, layer.rows, layer.cols, wire);
  };
  m.lanes = {{std::string(sfb::kHalfLane), 1.0}};
  return m;
}

SfbScheme::SfbScheme(const SyncContext& ctx, LaneRouter& router,
                     const std::vector<std::size_t>& layers, const collective::SegmentCodec* wire)
    : ctx_(ctx),
      router_(router),
      wire_(wire),
      lane_(router.route(
          wire == nullptr ? sfb::kLane : sfb::kHalfLane,
          [this](std::size_t from, net::Message&& m) { on_factors(from, std::move(m)); })),
      layers_(ctx.model.num_layers()) {
  tasks::Model& model = ctx_.model;
  // On a device model the factor downloads, the rebuild and the step use the device (send_factors,
  // apply_factors) from the thread that drives the Model: the compute arena's, which must
  // therefore be that one thread.
  tasks::Backend* device = model.on_device() ? &model.backend() : nullptr;
  if (device != nullptr) {
    GRADMESH_CHECK_EQ(ctx_.executor.options().compute_threads, std::size_t{1},
                      "SFB on a device model: compute arena threads (the Model's one thread)");
  }
  for (std::size_t l : layers) {
    tasks::Layer& layer = model.layer(l);
    GRADMESH_CHECK(layer.has_sufficient_factors(), "SFB on a layer without sufficient factors");
    layers_[l] = std::make_unique<SfbLayer>(layer.output_size(), layer.input_size(),
                                            ctx_.batch_size, ctx_.nodes, ctx_.rank, device, wire);
    // The mean dW is rebuilt from every node's factors: the local one would be thrown away.
    layer.set_parameter_gradients_enabled(false);
    // One velocity per parameter: the layer's lives where it is stepped.
    if (device != nullptr) {
      ctx_.optimizer.keep_on_device(*device, model.parameter_offset(l), layer.parameter_count());
    }
  }
}

void SfbScheme::build(engine::Graph& graph, const IterationTasks& tasks) {
  // On a device, send (its factor downloads) and apply (device work it enqueues) use the Model's
  // device stream, so they run on the Model's thread (see the constructor); on the host they run
  // beside the compute thread, the rebuild GEMM included.
  const engine::Arena arena =
      ctx_.model.on_device() ? engine::Arena::kCompute : engine::Arena::kNetwork;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    if (!layers_[l]) continue;
    const std::string suffix = "_" + std::to_string(l);
    auto send = graph.emplace("sfb_send" + suffix, arena,
                              [this, l](engine::TaskContext& t) { send_factors(l, t.run()); });
    auto wait =
        graph.emplace("sfb_wait" + suffix, engine::Arena::kNetwork,
                      [this, l](engine::TaskContext& t) { layers_[l]->await(t.run(), t.defer()); });
    auto apply = graph.emplace("sfb_apply" + suffix, arena,
                               [this, l](engine::TaskContext& t) { apply_factors(l, t.run()); });
    tasks.backward[l].precede(send);
    send.precede(wait);
    wait.precede(apply);
    apply.precede(tasks.done);
  }
}

void SfbScheme::fail_all(std::exception_ptr error) {
  for (auto& layer : layers_) {
    if (layer) layer->fail_all(error);
  }
}

double SfbScheme::bytes_sent(std::size_t layer) const {
  if (layer >= layers_.size() || !layers_[layer] || ctx_.nodes < 2) return 0;
  return static_cast<double>(ctx_.nodes - 1) *
         (static_cast<double>(layers_[layer]->factor_bytes()) +
          frame_overhead_bytes(lane_, kFactors));
}

std::string SfbScheme::describe(std::size_t layer) const {
  (void)layer;
  if (wire_ == nullptr) return "SFB";
  return "SFB " + std::string(wire_->name());
}

void SfbScheme::send_factors(std::size_t layer, std::uint64_t round) {
  const net::Payload factors =
      layers_[layer]->pack(round, ctx_.model.layer_output_gradient(layer, ctx_.batch_size),
                           ctx_.model.layer_input(layer, ctx_.batch_size));
  throw_first(router_.broadcast(
      net::Message{lane_, kFactors, layer, round, factors, static_cast<std::uint32_t>(layer)}));
}

void SfbScheme::apply_factors(std::size_t layer, std::uint64_t round) {
  tasks::Model& model = ctx_.model;
  tasks::Layer& info = model.layer(layer);
  const std::size_t weights = info.output_size() * info.input_size();
  const std::size_t offset = model.parameter_offset(layer);
  if (model.on_device()) {
    // Gradient and step stay on the device: U and V go up, the M x N gradient never crosses
    // PCIe, and the Model holds the layer's device copy as the current one.
    const std::span<float> gradients = model.device_layer_gradients(layer);
    layers_[layer]->rebuild_on_device(round, gradients.first(weights), gradients.subspan(weights));
    ctx_.optimizer.step_on_device(offset, model.device_layer_parameters(layer), gradients);
    return;
  }
  const std::span<float> gradients = model.layer_gradients(layer);
  layers_[layer]->rebuild(round, gradients.first(weights), gradients.subspan(weights));
  ctx_.optimizer.step(offset, model.layer_parameters(layer), gradients);
}

void SfbScheme::on_factors(std::size_t from, net::Message&& message) {
  if (message.kind != kFactors || message.key >= layers_.size() || !layers_[message.key]) {
    router_.reject(from, lane_,
                   "kind " + std::to_string(message.kind) + ", layer " +
                       std::to_string(message.key) + ": not the factors of an SFB layer");
    return;
  }
  std::string why;
  if (!layers_[message.key]->store(from, message.round, std::move(message.payload), &why)) {
    router_.reject(from, lane_, "layer " + std::to_string(message.key) + ": " + why);
  }
}

}  // namespace gradmesh::sync
