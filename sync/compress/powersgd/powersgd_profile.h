#pragma once
// What PowerSGD's passes cost this node's CPU, measured at start-up for the planner (the
// counterpart of codec_profile.h's profile_codec for the one compression method that is a scheme
// of its own: Vogels, Karimireddy, Jaggi, NeurIPS'19, Alg. 1).

#include <cstddef>
#include <cstdint>
#include <span>

#include "sync/compress/codec_profile.h"

namespace gradmesh::sync::compress {

/// The seconds of PowerSGD's passes (sync/compress/powersgd/powersgd.h, Vogels et al., NeurIPS'19,
/// Alg. 1) of rank `rank` on each layer's weight matrix, measured on this node's host:
/// encode_seconds[l] is steps 1 and 2 (M = g + e with P = M Q, then P_hat and Q = M^T P_hat),
/// decode_seconds[l] step 3 (the approximation a block at a time with the new residual, its blocks
/// handed to a caller that does nothing: the optimizer step is priced on its own), for one node's
/// sum (the passes do not depend on the node count). Each distinct shape is measured on its first
/// min(rows, max(1, kMaxProfiledFloats / cols)) rows (the passes go a block of rows at a time:
/// linear in rows) with seeded random gradients, one round untimed, then rounds until `min_seconds`
/// have passed (at least one), and scaled to the layer's rows, with OpenBLAS at one thread
/// (tasks::cpu::SingleBlasThread). A 0 x 0 shape reads 0. half_*: 0. Allocates a
/// PowerSgd and a gradient of the largest measured size. Thread safety: any thread (owns its
/// buffers). Throws ContractError for a min_seconds that is negative or not finite, and
/// ConfigError for rank 0 (PowerSgd).
[[nodiscard]] CodecProfile profile_powersgd(std::size_t rank, std::span<const MatrixShape> shapes,
                                            double min_seconds, std::uint64_t seed);

}  // namespace gradmesh::sync::compress
