#pragma once
// Test support shared by the compressed schemes' planner tests (PowerSGD, top-k and random-k,
// compressed PS; issue 28): layer profiles and a 4-node planner input with a compressor allowed.
// Header-only.

#include <string>
#include <utility>
#include <vector>

#include "sync/compress/options.h"
#include "topo/planner.h"

namespace gradmesh::testing {

/// A dense layer of `outputs` x `inputs` weights and a bias (sufficient factors; 1 ms forward,
/// 2 ms backward).
inline topo::LayerProfile dense_profile(std::string name, std::size_t outputs, std::size_t inputs) {
  topo::LayerProfile p{
      std::move(name), outputs * inputs + outputs, true, outputs, inputs, 1e-3, 2e-3};
  p.weight_rows = outputs;
  p.weight_cols = inputs;
  return p;
}

/// 4 nodes of `layers`, K = 64, uniform links of alpha 1e-4 s and `bandwidth` bytes/s, 64 bytes a
/// frame, a GEMM of `gemm_flops` FLOP/s, an optimizer step of `step_per_float` s a float; the
/// uncompressed `schemes`, then the compressed ones `options` allows (add_compressed_schemes).
inline topo::PlannerInput compressed_planner_input(std::vector<topo::LayerProfile> layers,
                                                   std::vector<topo::SchemeModel> schemes,
                                                   const sync::CompressionOptions& options,
                                                   double bandwidth, double step_per_float,
                                                   double gemm_flops = 2e10) {
  topo::PlannerInput in;
  in.layers = std::move(layers);
  in.batch = 64;
  in.nodes = 4;
  in.links = topo::LinkMatrix::uniform(4, 1e-4, bandwidth);
  in.gemm_flops = gemm_flops;
  in.step_seconds_per_float = step_per_float;
  in.frame_overhead_bytes = 64;
  in.schemes = std::move(schemes);
  sync::add_compressed_schemes(options, in);
  return in;
}

}  // namespace gradmesh::testing
