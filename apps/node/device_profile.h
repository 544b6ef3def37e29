#pragma once
// Device profiles (issue 58, item 3): what a node's start-up profile measures of its compute (per
// layer forward and backward times, the GEMM rate, the optimizer step, the compressor's encodes and
// decodes), written to a file by `gradmesh-node profile` on one machine (this host, a GPU machine)
// and read by `gradmesh-node simulate --device FILE` to predict the job on clusters of that
// machine. TOML, one [profile] table and one [[layer]] table a layer, so that a person can read
// and edit one and an error names its line and key.

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "sync/probe/node_profile.h"

namespace gradmesh::tasks {
class Model;
}

namespace gradmesh::app {

/// One machine's compute for one job's model, as the planner reads it (sync::JobMeasurements
/// without the links: a profile says nothing about the network).
struct DeviceProfile {
  std::string job;          ///< job.name it was timed for
  std::string device;       ///< what computed: the backend's description
  std::string compression;  ///< sync.compression.method whose codec times it holds ("none")
  std::size_t batch = 0;    ///< samples per node per iteration it was timed at
  std::size_t nodes = 0;    ///< node count the SFB GEMM's shape was sized for
  std::vector<std::string> layer_names;       ///< per layer, Layer::name()
  std::vector<std::size_t> layer_parameters;  ///< per layer, parameter count
  sync::JobMeasurements measured;             ///< links empty (nodes 0)
};

/// `profile` as TOML text: a header comment naming `command`, then [profile] (format = 1, job,
/// device, compression, batch, nodes, gemm_flops in FLOP/s, step_seconds_per_float,
/// half_encode_seconds_per_float, half_decode_seconds_per_float) and one [[layer]] a layer (name,
/// parameters, forward_seconds, backward_seconds, backward_input_seconds, and encode_seconds,
/// decode_seconds where codec times were measured). Floats are written so that they read back
/// to the same bits. Pure.
[[nodiscard]] std::string device_profile_text(const DeviceProfile& profile,
                                              const std::string& command);

/// Writes device_profile_text() to `path` (replacing it). Throws ConfigError naming the path
/// when it cannot be written.
void write_device_profile(const DeviceProfile& profile, const std::string& command,
                          const std::filesystem::path& path);

/// Reads a profile written by write_device_profile() (or by hand). Throws ConfigError naming
/// the path, the line and the key for a syntax error, a missing key, a value of the wrong type
/// or out of range (times and rates finite and >= 0, gemm_flops > 0; batch and nodes >= 1; every
/// layer's encode and decode times or none), or a format other than 1.
[[nodiscard]] DeviceProfile read_device_profile(const std::filesystem::path& path);

/// Checks that `profile` was timed for `model` at `batch`: the same layer count, each layer's
/// parameter count, and the batch. Throws ConfigError naming `path` and the first difference
/// (the layer by index and name).
void check_profile_fits(const DeviceProfile& profile, tasks::Model& model, std::size_t batch,
                        const std::filesystem::path& path);

}  // namespace gradmesh::app
