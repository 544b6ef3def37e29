#pragma once
// How the planner prices PowerSGD on a layer (issue 28; Vogels, Karimireddy, Jaggi, "PowerSGD:
// Practical Low-Rank Gradient Compression for Distributed Optimization", NeurIPS'19, Alg. 1).

#include <cstddef>
#include <optional>
#include <string_view>

#include "topo/cost_model.h"
#include "topo/scheme_model.h"

namespace gradmesh::sync {

/// The scheme's id (plans, checkpoints' plan signatures) and the lane it sends on.
inline constexpr std::string_view kPowerSgdScheme = "powersgd";
inline constexpr std::string_view kPowerSgdLane = "powersgd";

/// PowerSGD's passes over a layer's weights (M = g + e with P = M Q a block of rows at a time;
/// Q = M^T P; P Q^T, e = M - out and the step a block at a time, less the step itself), in the
/// time of optimizer steps over as many floats (the start-up probe's step: tasks/profile.h):
/// bench/powersgd_step.cpp measured 2.36-2.41 for 4096 x 4096 at rank 4 (26.0-26.5 ms against an
/// 11 ms step, one thread, 2026-11-28).
inline constexpr double kPowerSgdPassesInSteps = 2.4;

/// One node's cost per iteration of PowerSGD of rank r on a layer whose weights are a
/// rows x cols matrix M plus `bias` floats, r = min(rank, rows, cols): two ring all-reduces in
/// sequence, of P with the bias (4 (rows r + bias) bytes) and of Q (4 cols r bytes):
///   bytes_sent = ring_allreduce_bytes(P) + ring_allreduce_bytes(Q),
///   comm_seconds = T_ar(P) + T_ar(Q)   (MG-WFBP eq. 9 for each),
///   compute_seconds = codec_seconds + (rows cols + bias) step_seconds_per_float  (the step),
///   codec_seconds   = measured->encode + measured->decode: the passes as start-up timed them on
///                     every node at once (compress::profile_powersgd, the slowest node's), or
///                     without a measurement max(6 rows cols r / gemm_flops,  (P = M Q, Q = M^T P,
///                     P Q^T) and kPowerSgdPassesInSteps rows cols step_seconds_per_float (passes).
/// At small r the passes bound the GEMMs, not the flops (the GEMMs read M at memory speed).
/// The two GEMMs before and between the all-reduces are counted after them (they hold no link; the
/// planner's timeline charges compute after the layer's communication). One node: all 0. Throws
/// ContractError for a bad cluster, or a GEMM rate <= 0 on several nodes.
[[nodiscard]] topo::SchemeCost powersgd_cost(
    const topo::ClusterCost& cluster, std::size_t rows, std::size_t cols, std::size_t bias,
    std::size_t rank, const std::optional<topo::CodecSeconds>& measured = std::nullopt);

/// PowerSGD of rank `rank` as the planner sees it: fits a layer with a weight matrix
/// (LayerProfile::weight_rows x weight_cols, its bias one float a row); cost powersgd_cost, with
/// the layer's measured passes (LayerProfile::codec) when start-up timed them; one lane; neither
/// bucketed nor chunked.
[[nodiscard]] topo::SchemeModel powersgd_scheme_model(std::size_t rank);

}  // namespace gradmesh::sync
