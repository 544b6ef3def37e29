#pragma once
// What start-up measures of a job's compression method (issue 28: "measured at start-up per
// layer, like the GEMM rate"; issue 56: apps/ names no compressor, it asks here).

#include <cstdint>
#include <optional>

#include "sync/compress/codec_profile.h"
#include "sync/compress/options.h"
#include "tasks/model.h"

namespace gradmesh::sync {

/// Whether start-up measures `compression`'s passes on `model`: a registered lossy compressor's
/// encode and decode (on a host or a device model), PowerSGD's passes on a host model (on a device
/// they are priced from the GEMM rate and the step). Pure.
[[nodiscard]] bool measures_compression(const CompressionOptions& compression,
                                        const tasks::Model& model);

/// The compression method's passes timed on `model`'s layers, data from `seed`: for a registered
/// compressor its encode and decode on the floats of each layer at the method's parameters
/// (compress::profile_codec, at least 10 ms a figure; on a device model through DeviceCodec where
/// its kernels implement the compressor); for powersgd its passes at sync.compression.rank on
/// each layer's weight matrix (compress::profile_powersgd, at least 50 ms a shape: encode = steps
/// 1 and 2, decode = step 3). nullopt where measures_compression() is false. What the planner
/// prices the compressed schemes at. Thread safety: reads the model's shapes only (and the device
/// through its backend). Throws as the profiles do.
[[nodiscard]] std::optional<compress::CodecProfile> measure_compression(
    const CompressionOptions& compression, tasks::Model& model, std::uint64_t seed);

}  // namespace gradmesh::sync
