#pragma once
// How the planner prices a compressor exchanged per layer with error feedback (issue 28; issue 56:
// any registered compressor, priced through its own entry): all-gathered where the nodes'
// encodings differ in what they send (top-k's (index, value) pairs, sign's bits, qsgd's levels),
// summed on a ring where every node sends the same indices (random-k: Stich, Cordonnier, Jaggi,
// "Sparsified SGD with Memory", NeurIPS'18, Alg. 1, with a seed every node shares for the
// iteration, so that the n nodes' values share indices and sum as a dense vector of k floats).

#include <cstddef>
#include <optional>
#include <string_view>

#include "sync/compress/compressor.h"
#include "topo/cost_model.h"
#include "topo/scheme_model.h"

namespace gradmesh::sync {

/// The lane of the gathered scheme of compressor `entry` (its name: "topk", "randomk", "sign").
[[nodiscard]] std::string_view gathered_lane(const compress::CompressorEntry& entry) noexcept;

/// The passes of the scheme over the layer's floats beside the compressor's own: clearing the sum
/// (all-gather) or scattering (ring), and the scaling by 1/n, in optimizer steps a float, from
/// bench/codec_step.cpp (decoding 4 top-k encodings of 1M floats 0.4-0.6 steps, 64k floats
/// 0.3-0.8; docs/compression.md).
inline constexpr double kSparseDecodeSteps = 0.6;

/// One node's cost per iteration of compressor `entry` with `params` on a layer of `floats`
/// floats, its encoding of `bytes` = entry.encoded_bytes(floats, params):
/// all-gathered (not entry.traits.shared_indices): each node sends its encoding straight to the
/// n - 1 others, one message each (an all-gather of one hop, as SFB's broadcast), and sums the n
/// nodes' decodings in rank order:
///   bytes_sent = (n - 1)(bytes + h),   messages = n - 1,
///   comm_seconds = alpha + (n - 1) o + bytes_sent / B;
/// shared indices: the encodings (k floats) summed by one ring all-reduce:
///   bytes_sent = ring_allreduce_bytes(bytes),   comm_seconds = T_ar(bytes) (MG-WFBP eq. 9).
/// Both: encode_seconds = entry.cost.encode_steps floats step_seconds_per_float (before the
/// communication: the layer is sent once encoded), decodes = n decode_steps (gathered) or
/// decode_steps (ring) plus kSparseDecodeSteps, all times floats step_seconds_per_float;
/// compute_seconds = decodes + one step (after the communication), codec_seconds the encode and
/// the decodes. With the layer's codec times start-up measured (`measured`,
/// topo::LayerProfile::codec) the encode and the decodes of the encodings are those figures
/// (encode + n decode, or + 1 decode), and the passes of the scheme stay kSparseDecodeSteps.
/// The gathered bytes grow with n (they cannot be summed on the way), so at large n a ring of
/// random-k or fp16 wins: the planner sees it. One node: all 0. Throws ContractError for a bad
/// cluster.
[[nodiscard]] topo::SchemeCost gathered_cost(
    const topo::ClusterCost& cluster, std::size_t floats, const compress::CompressorEntry& entry,
    const compress::CompressorParams& params,
    const std::optional<topo::CodecSeconds>& measured = std::nullopt);

/// Compressor `method` (a registered name other than a lossless one) with `params` as the
/// planner sees it: id and lane the compressor's name; fits every layer with parameters (the
/// whole layer, its bias included, is one vector); cost gathered_cost; neither bucketed nor
/// chunked. Throws ConfigError for an unknown name.
[[nodiscard]] topo::SchemeModel sparse_scheme_model(std::string_view method,
                                                    const compress::CompressorParams& params);

}  // namespace gradmesh::sync
