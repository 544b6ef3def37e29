#pragma once
// What a node reports once its iterations ended (the reporting side of Pipeline::run): the job's
// figures in NodeMetrics, the closing log line, the metrics file, the parameters and the trace.

#include <cstddef>
#include <cstdint>

#include "apps/config/job_config.h"
#include "apps/node/metrics.h"
#include "apps/pipeline/pipeline.h"
#include "apps/pipeline/progress.h"
#include "engine/trace_recorder.h"
#include "net/transport.h"
#include "sync/sync_stage.h"
#include "tasks/model.h"

namespace gradmesh::app {

/// A finished run as Pipeline::run saw it. References outlive the call.
struct CompletedRun {
  net::Transport* transport;  ///< shut down already; nullptr on one node
  const sync::SyncStage& stage;
  tasks::Model& model;
  const JobConfig& config;
  const NodeOptions& options;
  const MembershipView& membership;
  std::size_t rank = 0;
  std::size_t nodes = 1;
  std::size_t batch = 0;     ///< K, samples per node per iteration
  std::uint64_t start = 0;   ///< the first iteration this process ran (> 0 after a resume)
  std::uint64_t done = 0;    ///< iterations done at the end
  double train_seconds = 0;  ///< time in iterations, seconds (evaluation left out)
  /// kRecords: the "done" line is a record for gradmesh-launch ("@gradmesh done {json}").
  ProgressStyle progress_style = ProgressStyle::kLines;
};

/// What one view's `transport` (nullptr: none, one node) and `stage` (nullptr: not built yet)
/// refused so far: the metrics' fault counters of that view. Thread safety: the transport's
/// counters() and the stage's rejected_messages() (any thread).
[[nodiscard]] FaultCounters view_fault_counters(const net::Transport* transport,
                                                const sync::SyncStage* stage);

/// Fills the job-level fields of `metrics` (the loop filled the per-epoch ones): the transport's
/// byte counters and the fault counters over every view of the job (warning of peers silent for
/// over half of net.peer_timeout), the node, view and strategy, iterations, samples and samples/s,
/// bytes per iteration, the stage's plan and summary. Thread safety: the node's thread.
void complete_metrics(NodeMetrics& metrics, const CompletedRun& run);

/// Logs the run's closing line and, with --metrics-out DIR, writes DIR/metrics-<rank>.json, the
/// parameters (--save-parameters: DIR/parameters-<rank>.f32, raw floats) and the trace
/// (`trace`, when recorded: DIR/trace-<rank>.json). Throws Error when a file cannot be written.
void report_run(const NodeMetrics& metrics, const CompletedRun& run,
                const engine::TraceRecorder* trace);

}  // namespace gradmesh::app
