#pragma once
// How the planner prices the sparsifying compressors on a layer (issue 28): top-k exchanged by
// all-gather of (index, value) pairs, random-k summed on a ring (Stich, Cordonnier, Jaggi,
// "Sparsified SGD with Memory", NeurIPS'18, Alg. 1: the k entries with error feedback; random-k
// with a seed every node shares for the iteration, so that the n nodes' values share indices and
// sum as a dense vector of k floats).

#include <cstddef>
#include <optional>
#include <string_view>

#include "sync/compress/codec.h"
#include "topo/cost_model.h"
#include "topo/scheme_model.h"

namespace gradmesh::sync {

/// The schemes' ids (plans, checkpoints' plan signatures) and the lanes they send on.
inline constexpr std::string_view kTopKScheme = "topk";
inline constexpr std::string_view kRandomKScheme = "randomk";
inline constexpr std::string_view kTopKLane = "topk";
inline constexpr std::string_view kRandomKLane = "randomk";

/// The CPU time of one encode and of the n decodes, in optimizer steps over the layer's floats,
/// from bench/codec_step.cpp (1M floats: top-k 8.4, random-k 1.0, decoding 4 encodings 0.4-0.6;
/// 64k floats, where the step runs in cache: 18.5, 1.5 and 0.3-0.8; docs/compression.md).
/// Top-k's encode: p = g + e, the norms, the selection (nth_element over an index array), the
/// sort of the k kept; random-k's: p = g + e, the norms, k gathers. Decoding the n encodings: one
/// pass to clear the sum (top-k) or to scatter (random-k), n k adds, the scaling by 1/n.
inline constexpr double kTopKEncodeSteps = 10.0;
inline constexpr double kRandomKEncodeSteps = 1.5;
inline constexpr double kSparseDecodeSteps = 0.6;

/// One node's cost per iteration of top-k on a layer of `floats` floats at `ratio`
/// (k = compress::kept_entries(floats, ratio)): each node sends its k (u32 index, f32 value) pairs
/// straight to the n - 1 others, one message each (an all-gather of one hop, as SFB's broadcast),
/// and sums the n nodes' decodings in rank order:
///   bytes_sent = (n - 1)(8 k + h),   messages = n - 1,
///   comm_seconds = alpha + (n - 1) o + bytes_sent / B,
///   encode_seconds = kTopKEncodeSteps floats step_seconds_per_float (before the communication:
///   the layer is sent once encoded),
///   compute_seconds = (kSparseDecodeSteps + 1) floats step_seconds_per_float (the decodes, the
///   optimizer step), codec_seconds the encode and the decodes;
/// with the layer's codec times start-up measured (`measured`, topo::LayerProfile::codec) the
/// encode and the n decodes of k entries are those figures (encode + n decode), and the passes
/// over the layer that clear and scale the sum stay kSparseDecodeSteps steps.
/// The bytes grow with n (all-gather: a sparse vector's indices differ per node, it cannot be
/// summed on the way), so at large n a ring of random-k or fp16 wins: the planner sees it. One
/// node: all 0. Throws ContractError for a bad cluster.
[[nodiscard]] topo::SchemeCost topk_cost(
    const topo::ClusterCost& cluster, std::size_t floats, double ratio,
    const std::optional<topo::CodecSeconds>& measured = std::nullopt);

/// One node's cost per iteration of random-k on a layer of `floats` floats at `ratio`: the k
/// values at the iteration's shared indices, summed by one ring all-reduce of 4 k bytes:
///   bytes_sent = ring_allreduce_bytes(4 k),   comm_seconds = T_ar(4 k) (MG-WFBP eq. 9),
///   encode_seconds = kRandomKEncodeSteps floats step_seconds_per_float (before the ring),
///   compute_seconds = (kSparseDecodeSteps + 1) floats step_seconds_per_float;
/// measured (`measured`): encode + decode (the k sums scattered once) + kSparseDecodeSteps steps
/// of passes.
/// One node: all 0. Throws ContractError for a bad cluster.
[[nodiscard]] topo::SchemeCost randomk_cost(
    const topo::ClusterCost& cluster, std::size_t floats, double ratio,
    const std::optional<topo::CodecSeconds>& measured = std::nullopt);

/// Top-k (`kind` kTopK) or random-k (kRandomK) at `ratio` as the planner sees it: fits every
/// layer with parameters (the whole layer, its bias included, is one sparse vector); cost
/// topk_cost or randomk_cost; one lane; neither bucketed nor chunked. Throws ContractError for
/// another kind.
[[nodiscard]] topo::SchemeModel sparse_scheme_model(compress::CodecKind kind, double ratio);

}  // namespace gradmesh::sync
