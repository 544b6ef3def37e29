#pragma once
// A node's start-up, before its sync stage exists (internal to apps/pipeline): the peer list from
// the command line, this node's BLAS threads, the planner's measurements (DESIGN.md "Measure,
// don't guess") and the log line of the plan that came of them.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "apps/config/job_config.h"
#include "apps/pipeline/pipeline.h"
#include "sync/compress/options.h"
#include "sync/probe/link_probe.h"
#include "sync/sync_stage.h"
#include "tasks/cpu/blas.h"
#include "tasks/cpu/cpu_backend.h"
#include "tasks/model.h"
#include "topo/peer_list.h"

namespace gradmesh::app {

/// The peers of --peers or --peers-file, else one local node. Throws ConfigError when both are
/// given, and what topo::PeerList throws for a bad list or file.
[[nodiscard]] topo::PeerList peer_list(const NodeOptions& options);

/// Creates `dir` (and its parents) and writes, syncs and removes a small file in it, so that a
/// folder the job would write into only later (checkpoint.dir after an epoch, --metrics-out at the
/// end) fails at start-up, before any training it should keep. `what` names the setting
/// ("checkpoint.dir", "--metrics-out"). Throws ConfigError naming it, the path and why (exit
/// status 2): a regular file in the way, no permission, a read-only file system, a full disk.
void check_writable_folder(const std::filesystem::path& dir, std::string_view what,
                           std::size_t rank);

/// Compute threads for this node (tasks::cpu::set_threads: BLAS and the CPU kernels' loops):
/// compute.threads, else this machine's cores shared by the peers on
/// its host (at least 1).
/// The CPU kernel set compute.cpu_kernels names ("auto": oneDNN where this binary was built with
/// it, else builtin). Never throws; tasks::cpu::set_kernels refuses "onednn" without oneDNN.
[[nodiscard]] tasks::cpu::CpuKernels cpu_kernels(const JobConfig& config);

[[nodiscard]] int compute_threads(const JobConfig& config, const topo::PeerList& peers,
                                  std::size_t rank);

/// LinkProbe::barrier tags of start-up, increasing as the barriers come: measure_job's before the
/// compute profile, before each of its layer passes, before its GEMM's and its step's measurement,
/// and before the compressor's probe, then the node builder's once every node routed its sync
/// stage's handlers.
inline constexpr std::uint64_t kComputeProfileBarrier = 0;
/// One before each of the compute profile's layer passes (tasks::kProfileWarmUpPasses +
/// kProfileTimedPasses of them: the last is kGemmProbeBarrier - 1).
inline constexpr std::uint64_t kLayerPassBarrier = 1;
inline constexpr std::uint64_t kGemmProbeBarrier = 8;  // and kGemmProbeBarrier + 1: the step's
inline constexpr std::uint64_t kCompressorProbeBarrier = 10;
inline constexpr std::uint64_t kStageRoutedBarrier = 11;

/// The planner's start-up measurements (DESIGN.md "Measure, don't guess"): this node's links
/// (alpha in seconds, B in bytes/s to every peer; sync::LinkProbe), its per-layer forward /
/// backward times, GEMM rate (FLOP/s) and optimizer step time (seconds/float; tasks/profile.h),
/// exchanged so that every node plans from the same figures (sync::combine: the slowest link, the
/// slowest node's layer times). Every node calls it at once; nodes profile their compute together,
/// after a barrier; then the `compression` method's encode and decode on each layer
/// (sync::measure_compression). With `sealed` frames, also what the frame cipher costs a byte
/// (net::auth::measure_cipher_seconds_per_byte; the slowest node's). Throws PeerError for a
/// failed or silent peer. Logs what it measured. `adam`: the node's optimizer is Adam (its step
/// is timed, not SGD's).
[[nodiscard]] sync::JobMeasurements measure_job(
    sync::LinkProbe& probe, tasks::Model& model, std::size_t batch, std::uint64_t seed,
    std::size_t nodes, const sync::CompressionOptions& compression, bool sealed = false,
    const std::optional<tasks::AdamOptions>& adam = std::nullopt);

/// Logs the stage's predicted bytes and iteration time, when its summary has them.
void log_summary(const sync::SyncStage& stage);

/// The planner's choice about compression in one line, from a stage's summary
/// (SyncStage::summary: predicted_compressed_iteration_seconds and
/// predicted_uncompressed_iteration_seconds, in seconds): "compression planned: X ms per
/// iteration predicted with it, Y ms without (planned when it saves 10% or more)", or "left off";
/// nullopt when the summary holds no comparison (no compressor allowed). log_summary() logs it and
/// `gradmesh-node plan` prints it.
[[nodiscard]] std::optional<std::string> compression_choice_text(
    const std::map<std::string, double>& summary);

}  // namespace gradmesh::app
