#include "apps/pipeline/run_report.h"

#include <cstdio>
#include <string>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>

#include <spdlog/spdlog.h>

#include "engine/error.h"

namespace gradmesh::app {

namespace {

void save_parameters(const std::filesystem::path& dir, const std::string& name,
                     std::span<const float> parameters) {
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(parameters.data()),
            static_cast<std::streamsize>(parameters.size_bytes()));
  if (!out) throw Error("cannot write " + path.string());
}

/// Warns of each peer whose connection once went silent (no byte read) for over half of
/// net.peer_timeout (`peer_timeout_s`, seconds; 0: no check): past it this node would have asked
/// the others about it, and failed it had none heard it. On a slow, shared link TCP's
/// retransmission backoff can hold a connection silent for seconds (docs/slow-links.md).
/// Never throws.
void warn_long_silences(const net::Transport& transport, const net::Counters& counters,
                        double peer_timeout_s) noexcept {
  if (peer_timeout_s <= 0) return;
  for (std::size_t r = 0; r < counters.longest_silence_by_peer.size(); ++r) {
    const double silence = counters.longest_silence_by_peer[r];
    if (silence <= peer_timeout_s / 2) continue;
    try {
      spdlog::warn(
          "peer rank {} ({}) sent nothing for {:.1f} s at one point, over half of "
          "net.peer_timeout ({:.1f} s); past it this node asks the other peers, and fails the "
          "peer when none hears it (on a slow or congested link raise net.peer_timeout)",
          r, transport.peer_address(r), silence, peer_timeout_s);
    } catch (...) {
    }
  }
}

}  // namespace

FaultCounters view_fault_counters(const net::Transport* transport, const sync::SyncStage* stage) {
  FaultCounters out;
  if (transport != nullptr) {
    const net::Counters c = transport->counters();
    out.malformed_frames = c.malformed_frames;
    out.rejected_connections = c.rejected_connections;
    out.unverified_frames = c.unverified_frames;
  }
  if (stage != nullptr) out.rejected_messages = stage->rejected_messages();
  return out;
}

void complete_metrics(NodeMetrics& metrics, const CompletedRun& run) {
  if (run.transport != nullptr) {
    const net::Counters counters = run.transport->counters();
    metrics.bytes_sent = counters.bytes_sent;
    metrics.bytes_received = counters.bytes_received;
    metrics.bytes_sent_by_lane = counters.bytes_sent_by_lane;
    metrics.bytes_received_by_lane = counters.bytes_received_by_lane;
    metrics.longest_silence_seconds_by_peer = counters.longest_silence_by_peer;
    warn_long_silences(*run.transport, counters, run.config.net.peer_timeout);
  }
  const NodeOptions& options = run.options;
  metrics.rank = run.rank;
  metrics.nodes = run.nodes;
  metrics.strategy = std::string(run.stage.name());
  metrics.job = run.config.job.name;
  metrics.iterations = run.done - run.start;
  metrics.samples = (run.done - run.start) * run.batch;
  if (options.resume || options.rejoin) metrics.resumed_from_iteration = run.start;
  metrics.rollbacks = run.membership.rollbacks;
  metrics.view = run.membership.view;
  metrics.view_id = run.membership.id;
  metrics.rejoins_admitted = run.membership.rejoins_admitted;
  metrics.rejoined = options.rejoin || run.membership.rejoined;
  metrics.samples_per_second =
      static_cast<double>(metrics.samples) / std::max(run.train_seconds, 1e-9);
  metrics.bytes_sent_per_iteration =
      metrics.iterations > 0
          ? static_cast<double>(metrics.bytes_sent) / static_cast<double>(metrics.iterations)
          : 0.0;
  // The node's totals over the job: its earlier views' (before a rollback or a growth) added.
  FaultCounters faults = run.membership.earlier_views;
  faults += view_fault_counters(run.transport, &run.stage);
  metrics.malformed_frames = faults.malformed_frames;
  metrics.rejected_connections = faults.rejected_connections;
  metrics.unverified_frames = faults.unverified_frames;
  metrics.rejected_messages = faults.rejected_messages;
  metrics.parameters = run.model.parameter_count();
  metrics.batch_size = run.batch;
  metrics.plan = run.stage.plan();
  metrics.sync = run.stage.summary();
}

void report_run(const NodeMetrics& metrics, const CompletedRun& run,
                const engine::TraceRecorder* trace) {
  if (run.progress_style == ProgressStyle::kRecords) {  // gradmesh-launch prints the job's line
    std::printf(
        "%sdone {\"iterations\":%llu,\"seconds\":%.3f,\"samples_per_second\":%.3f,"
        "\"accuracy\":%.6f,\"bytes_per_iteration\":%.1f}\n",
        std::string(kRecordPrefix).c_str(), static_cast<unsigned long long>(metrics.iterations),
        metrics.wall_seconds, metrics.samples_per_second, metrics.test_accuracy,
        metrics.bytes_sent_per_iteration);
    std::fflush(stdout);
  } else {
    spdlog::info(
        "done: {} iterations in {:.1f} s, {:.0f} samples/s, test accuracy {:.2f}%, {:.0f} "
        "bytes sent per iteration",
        metrics.iterations, metrics.wall_seconds, metrics.samples_per_second,
        100.0 * metrics.test_accuracy, metrics.bytes_sent_per_iteration);
  }
  if (const auto& dir = run.options.metrics_out) {
    // A node that ends in a minority view tags its files (MembershipView::file_tag).
    const std::string tag = run.membership.file_tag();
    const std::string rank = std::to_string(run.rank);
    write_metrics(*dir, metrics, tag);
    if (run.options.save_parameters)
      save_parameters(*dir, "parameters-" + rank + tag + ".f32", run.model.parameters());
    if (trace) trace->write_chrome_trace(*dir / ("trace-" + rank + tag + ".json"), run.rank);
  }
}

}  // namespace gradmesh::app
