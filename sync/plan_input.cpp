#include "sync/plan_input.h"

#include <string>

#include "sync/allreduce/messages.h"
#include "sync/collective/ring_allreduce.h"
#include "sync/lane_router.h"
#include "sync/probe/link_probe.h"
#include "sync/ps/options.h"
#include "sync/scheme.h"
#include "tasks/layers/weighted_layer.h"

namespace gradmesh::sync {

topo::PlannerInput planner_input(const SyncContext& ctx, const std::vector<std::string>& schemes,
                                 const AssumedRates& rates) {
  topo::PlannerInput input;
  for (std::size_t l = 0; l < ctx.model.num_layers(); ++l) {
    tasks::Layer& layer = ctx.model.layer(l);
    topo::LayerProfile p;
    p.name = ctx.model.layer_name(l);
    p.parameters = layer.parameter_count();
    p.sufficient_factors = layer.has_sufficient_factors() && p.parameters > 0;
    if (p.sufficient_factors) {
      p.rows = layer.output_size();
      p.cols = layer.input_size();
    }
    const compress::MatrixShape weights = weight_matrix(layer);
    p.weight_rows = weights.rows;
    p.weight_cols = weights.cols;
    const LayerSeconds seconds = layer_seconds(layer, l, ctx.batch_size, rates.gemm_flops);
    p.forward_seconds = seconds.forward;
    p.backward_seconds = seconds.backward;
    if (p.sufficient_factors) p.backward_input_seconds = seconds.backward_input;
    input.layers.push_back(std::move(p));
  }
  input.batch = ctx.batch_size;
  input.nodes = ctx.nodes;
  input.links = topo::LinkMatrix::uniform(ctx.nodes, rates.alpha,
                                          ctx.options.max_send_rate.value_or(rates.bandwidth));
  input.links.message_seconds.assign(ctx.nodes, rates.message_seconds);
  input.gemm_flops = rates.gemm_flops;
  input.step_seconds_per_float = rates.step_seconds_per_float;
  if (const JobMeasurements* m = ctx.measured) {
    if (m->links.nodes == ctx.nodes) input.links = m->links;
    if (m->gemm_flops > 0) input.gemm_flops = m->gemm_flops;
    if (m->step_seconds_per_float > 0) input.step_seconds_per_float = m->step_seconds_per_float;
    if (m->forward_seconds.size() == input.layers.size()) {
      for (std::size_t l = 0; l < input.layers.size(); ++l) {
        input.layers[l].forward_seconds = m->forward_seconds[l];
        input.layers[l].backward_seconds = m->backward_seconds[l];
        if (m->backward_input_seconds.size() == input.layers.size() &&
            input.layers[l].sufficient_factors) {
          input.layers[l].backward_input_seconds = m->backward_input_seconds[l];
        }
      }
    }
    if (m->encode_seconds.size() == input.layers.size() &&
        m->decode_seconds.size() == input.layers.size()) {
      for (std::size_t l = 0; l < input.layers.size(); ++l) {
        if (m->encode_seconds[l] > 0) {
          input.layers[l].codec = topo::CodecSeconds{m->encode_seconds[l], m->decode_seconds[l]};
        }
      }
    }
    input.half_encode_seconds_per_float = m->half_encode_seconds_per_float;
    input.half_decode_seconds_per_float = m->half_decode_seconds_per_float;
    input.transport_seconds_per_byte = m->transport_seconds_per_byte;
  }
  const PlannerOptions& o = ctx.options.planner;
  const double cipher = ctx.measured != nullptr ? ctx.measured->cipher_seconds_per_byte : 0.0;
  for (std::size_t i = 0; i < input.links.alpha.size(); ++i) {
    if (o.alpha) input.links.alpha[i] = *o.alpha;
    if (o.bandwidth) input.links.bandwidth[i] = 1.0 / (1.0 / *o.bandwidth + cipher);
  }
  if (o.message_overhead)
    input.links.message_seconds.assign(input.links.nodes, *o.message_overhead);
  if (o.gemm_flops) input.gemm_flops = *o.gemm_flops;
  input.frame_overhead_bytes = frame_overhead_bytes(
      lane_id(allreduce::kLane), static_cast<std::uint16_t>(collective::RingKind::kReduceScatter));
  input.kv_chunk_bytes = ps_options(ctx.options.values).chunk_bytes;
  input.schemes = scheme_models(schemes);
  return input;
}

compress::MatrixShape weight_matrix(const tasks::Layer& layer) {
  if (const auto* weighted = dynamic_cast<const tasks::WeightedLayer*>(&layer)) {
    const std::size_t bias = weighted->bias_count();
    if (bias > 0 && weighted->weight_count() % bias == 0)
      return {bias, weighted->weight_count() / bias};
  }
  return {};
}

LayerSeconds layer_seconds(const tasks::Layer& l, std::size_t index, std::size_t batch,
                           double flops) {
  // Layer::forward_flops: 2 x parameters for a dense layer, 2 x weights x output positions for
  // a convolution, 2 x inputs without parameters.
  const double forward = static_cast<double>(batch) * l.forward_flops() / flops;
  // Under SFB the backward computes dx only (one forward's flops), and nothing for layer 0,
  // whose dx no layer needs (Model::backward_layer).
  return {forward, (l.parameter_count() > 0 ? 2.0 : 1.0) * forward, index > 0 ? forward : 0.0};
}

double compute_seconds(const topo::PlannerInput& input) {
  double seconds = 0, floats = 0;
  for (const topo::LayerProfile& layer : input.layers) {
    seconds += layer.forward_seconds + layer.backward_seconds;
    floats += static_cast<double>(layer.parameters);
  }
  return seconds + floats * input.step_seconds_per_float;
}

}  // namespace gradmesh::sync
