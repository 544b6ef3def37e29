#pragma once
// What the planner (topo/planner.h) is given about this job, from the model and the options.

#include <string>
#include <vector>

#include "sync/compress/codec_profile.h"
#include "sync/sync_stage.h"
#include "topo/planner.h"

namespace gradmesh::sync {

/// Figures the planner takes when nothing was measured (yet): the rates below. Measured values
/// (start-up probes of alpha and B, per-layer timings, the GEMM rate) replace them.
struct AssumedRates {
  double gemm_flops = 2e10;   ///< FLOP/s of one node's GEMM (about one core of this machine)
  double alpha = 100e-6;      ///< seconds of start-up per message
  double bandwidth = 1.25e9;  ///< bytes/s a node sends (10 Gbit/s) when net.max_send_rate is unset
  /// o, seconds each message costs (a kernel TCP send plus receive, wake-ups
  /// and dispatch on an idle core: ~10 us; topo/cost_model.h)
  double message_seconds = 10e-6;
  /// seconds per float of an optimizer step (w, g and the velocity, 12 bytes read and 8 written,
  /// at about 10 GB/s)
  double step_seconds_per_float = 2e-9;
};

/// The planner's input for `ctx`'s model: per layer its parameters, whether sufficient factors
/// apply (Layer::has_sufficient_factors) and its shape; t_f / t_b per layer, the link matrix and
/// the GEMM rate as the start-up probe measured them (ctx.measured), else estimated: t_f / t_b
/// from the layer's work (forward K x Layer::forward_flops(): 2 K M N flops for a dense layer,
/// 2 K F C k^2 OH OW for a convolution; backward twice that, and without dW (under SFB) once that,
/// 0 for layer 0; layers without parameters take
/// 2 K x inputs flops each way, at rates.gemm_flops) and a uniform link (rates.alpha, and
/// net.max_send_rate or rates.bandwidth as B, rates.message_seconds as o) and
/// rates.step_seconds_per_float (the compressor's encode and decode per layer and the 16-bit
/// blocks' rates as measured, else unset: the cost models' step multiples; the transport's work
/// per byte as measured, else 0); then planner.alpha,
/// planner.bandwidth, planner.message_overhead and planner.gemm_flops override what they name.
/// With sealed frames (ctx.measured->cipher_seconds_per_byte c > 0) a B that planner.bandwidth gave
/// becomes 1 / (1/B + c): a loop thread seals and writes in turn (README "Security"). A B the probe
/// measured is not changed: its transfers went sealed, so it holds the cipher's cost already.
/// Also the batch K, n, the frame overhead of a message, the KV chunk option and the models of
/// `schemes` (scheme ids: scheme_models()). Thread-safe (reads the model's shapes only). Throws
/// ContractError for an unknown scheme id.
[[nodiscard]] topo::PlannerInput planner_input(const SyncContext& ctx,
                                               const std::vector<std::string>& schemes,
                                               const AssumedRates& rates = {});

/// A layer's predicted seconds for a batch, from its work alone (what planner_input() takes when
/// nothing was measured, and `gradmesh-node simulate --device`): forward K x
/// Layer::forward_flops() at `flops` FLOP/s; backward twice that for a layer with parameters (dW
/// and dx), as much without; backward_input (under SFB: dx only) one forward, 0 for the model's
/// first layer (`index` 0). Pure.
struct LayerSeconds {
  double forward = 0, backward = 0, backward_input = 0;
};
[[nodiscard]] LayerSeconds layer_seconds(const tasks::Layer& layer, std::size_t index,
                                         std::size_t batch, double flops);

/// One node's predicted iteration alone, seconds: every layer's forward and backward plus the
/// optimizer step of every parameter (input.step_seconds_per_float a float), no communication:
/// the one-node reference of scaling figures and local's inner step t_c. Pure.
[[nodiscard]] double compute_seconds(const topo::PlannerInput& input);

/// Layer `layer`'s weights as a matrix, one row per bias (a dense layer's M x N, a convolution's
/// F x C k^2), as the planner sees them (topo::LayerProfile::weight_rows, weight_cols); 0 x 0 for a
/// layer without weights or biases, or whose weights do not divide by its biases. Pure.
[[nodiscard]] compress::MatrixShape weight_matrix(const tasks::Layer& layer);

}  // namespace gradmesh::sync
