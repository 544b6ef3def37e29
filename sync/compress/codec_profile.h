#pragma once
// What a compressor costs this node's CPU, measured at start-up for the planner (issue 28 item 2:
// "the encode/decode time measured at start-up per layer (like the GEMM rate today)"). The
// figures travel in the probe's profile exchange (sync/probe/node_profile.h), the slowest node's
// go into topo::LayerProfile::codec and topo::ClusterCost's 16-bit rates, and the compressed
// schemes' cost models price their encodes and decodes with them instead of the optimizer-step
// multiples bench/codec_step.cpp measured on this project's machine (which hold on a CPU like it
// and may not on another: without F16C an fp16 encode costs about 5x more).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "sync/compress/codec.h"
#include "tasks/backend.h"

namespace gradmesh::sync::compress {

/// The most floats one measurement touches; a larger layer's figure is scaled by its floats (each
/// codec is one or a few passes over the layer, linear once the buffers leave the caches). 4 Mi
/// floats, as tasks::measure_step_seconds_per_float.
inline constexpr std::size_t kMaxProfiledFloats = std::size_t{1} << 22;

/// A compressor's measured CPU time.
struct CodecProfile {
  /// Per layer (the index of `layer_floats`): one Codec::encode of the layer's floats with error
  /// feedback (DeviceCodec::encode on a device), seconds; 0 for a layer of 0 floats.
  std::vector<double> encode_seconds;
  /// Per layer: one Codec::decode_add of an encoding of the layer into a sum, seconds.
  std::vector<double> decode_seconds;
  /// fp16, bf16 only (else 0): encode_half_block with its half_block_scale, seconds/float.
  double half_encode_seconds_per_float = 0;
  /// fp16, bf16 only (else 0): decode_add_half_block, seconds/float.
  double half_decode_seconds_per_float = 0;
};

/// Whether sync.compression.method `method` runs a compressor on the host that start-up measures
/// with profile_codec: a registered compressor (compressor.h) other than a lossless one; false for
/// "none", a scheme method (scheme_method.h: measured by its own entry) and a name that is no
/// compressor. Thread-safe.
[[nodiscard]] bool measures_codec(std::string_view method);

/// Times compressor `method` (with `params`: top-k's and random-k's ratio, qsgd's bits) on each
/// layer's floats: for each
/// distinct size s of `layer_floats`, a Codec of min(s, kMaxProfiledFloats) floats with error
/// feedback encodes seeded random floats (uniform in [-1, 1), from `seed`) once untimed, then
/// repeatedly until `min_seconds` have passed (at least once); one decode_add into a sum likewise;
/// each figure scaled by s / min(s, kMaxProfiledFloats). For a compressor with a segment format
/// (fp16, bf16) also its segments, the rings' and SFB's factors' 16-bit blocks, over the largest
/// size. Allocates about 4 buffers of the largest measured size. Cost: about 2 x min_seconds per
/// distinct size (4 more for a segment format). Thread safety: any thread (owns its buffers).
/// Throws ConfigError for an unknown compressor or parameters out of its range (a ratio outside
/// (0, 1]), ContractError for a lossless one ("none") or a min_seconds that is negative or not
/// finite.
///
/// `device`: for a model on a compute device (not host-addressable), the backend whose
/// DeviceCodec encodes the layers' pushes (sync/compress/device_codec.h), where its kernels
/// implement the compressor (DeviceCodec::supports; another encodes on the host): the encode
/// figures are then its (from device memory, the encoding downloaded), the decodes and the 16-bit
/// blocks stay the host's (the schemes decode and sum on the host). Call it from the Model's
/// thread then. nullptr or a host backend: every figure the host's.
[[nodiscard]] CodecProfile profile_codec(std::string_view method, const CompressorParams& params,
                                         std::span<const std::size_t> layer_floats,
                                         double min_seconds, std::uint64_t seed,
                                         tasks::Backend* device = nullptr);

/// A layer's weights as a matrix for PowerSGD: rows x cols, 0 x 0 for a layer without one
/// (topo::LayerProfile::weight_rows, weight_cols).
struct MatrixShape {
  std::size_t rows = 0;
  std::size_t cols = 0;
};

}  // namespace gradmesh::sync::compress
