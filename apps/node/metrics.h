#pragma once
// The metrics file each node writes at the end of a job (DESIGN.md, "Contracts: Metrics").
// Field names are a contract with scripts and benchmarks: add fields freely, never rename.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "apps/recovery/membership_view.h"
#include "sync/sync_stage.h"

namespace gradmesh::app {

/// Everything written to DIR/node-<rank>.json. Bytes are payload + header bytes written to / read
/// from sockets, as counted by net::Transport.
struct NodeMetrics {
  std::size_t rank = 0;
  std::size_t nodes = 1;
  std::string strategy;
  std::string job;
  std::size_t epochs = 0;        ///< epochs begun (the last may be cut by job.max_iterations)
  std::uint64_t iterations = 0;  ///< iterations this process ran (after a resume: since it)
  /// --resume: the iteration the job continued from (iterations done before this process);
  /// nullopt for a fresh start. "resumed_from_iteration" in the file (null when fresh).
  std::optional<std::uint64_t> resumed_from_iteration;
  /// Times this node rolled back to a checkpoint and went on without a failed peer
  /// (run_with_recovery); its rank and the node count are the last view's.
  std::size_t rollbacks = 0;
  /// The membership view this node ended in: 0 at the start, one more per rollback or growth.
  std::size_t view = 0;
  /// That view's MembershipView::id ("" in view 0): the halves of a split differ in it.
  std::string view_id;
  /// Restarted nodes that rejoined at a checkpoint boundary of this node's views (BSP, issue 13).
  std::size_t rejoins_admitted = 0;
  /// Whether this node is a restarted one that rejoined (--rejoin: ako at once, BSP at a
  /// checkpoint boundary).
  bool rejoined = false;
  std::uint64_t checkpoints_written = 0;  ///< checkpoint files this node wrote (checkpoint.dir)
  std::uint64_t checkpoint_bytes = 0;     ///< size of the last one, bytes
  /// Time iterations waited for them, seconds: the state's copy, and the previous file's write
  /// when it had not ended yet.
  double checkpoint_seconds = 0;
  double checkpoint_write_seconds = 0;  ///< the files' writes (fsync, rename), in the background, s
  std::uint64_t samples = 0;            ///< training samples this node processed
  double wall_seconds = 0;   ///< start of the first iteration to the end of the last evaluation
  double train_seconds = 0;  ///< time spent in iterations (wall_seconds less evaluations)
  /// The end-of-job exchange after the last iteration (SyncStage::finish(): Ako's fold, local's
  /// final average; the layer states' average), evaluations left out, seconds. The final model
  /// exists train_seconds + finish_seconds of work after the start (wall_seconds adds the
  /// evaluations).
  double finish_seconds = 0;
  /// The first iteration's seconds: it pays one-off costs (first touch of buffers, the transport's
  /// first large writes) that the planner's predicted iteration time does not include.
  double first_iteration_seconds = 0;
  double samples_per_second = 0;  ///< this node's samples / train_seconds (evaluation excluded)
  double train_loss = 0;          ///< mean training loss (nats) over the last epoch's iterations
  double test_accuracy =
      0;  ///< fraction of the test images right, this node's replica after its last iteration
  double test_loss = 0;
  /// After SyncStage::finish(): equal to test_accuracy for BSP strategies; for Ako, the replica
  /// once every peer's last partitions are folded in (all replicas then equal).
  double final_test_accuracy = 0;
  double final_test_loss = 0;
  /// A user's evaluation's named figures (tasks::Model::Evaluation::metrics): the last epoch's,
  /// and after SyncStage::finish() (as final_test_accuracy). Empty for the built-in evaluation.
  std::map<std::string, double> test_metrics;
  std::map<std::string, double> final_test_metrics;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  double bytes_sent_per_iteration = 0;
  /// By lane name; written under the keys "bytes_sent_by_stage" / "bytes_received_by_stage" (the
  /// metrics file's contract kept its first word for lanes, docs/metrics.md).
  std::map<std::string, std::uint64_t> bytes_sent_by_lane;
  std::map<std::string, std::uint64_t> bytes_received_by_lane;
  std::uint64_t malformed_frames = 0;
  std::uint64_t rejected_connections = 0;  ///< inbound connections refused in the handshake
  std::uint64_t unverified_frames = 0;     ///< sealed frames that did not verify (security.encrypt)
  std::uint64_t rejected_messages = 0;
  /// index = rank: the longest a connection to that peer went without a byte read, seconds
  /// (net::Counters::longest_silence_by_peer; 0 for this node's own rank). Near net.peer_timeout:
  /// the peer was nearly taken for failed.
  std::vector<double> longest_silence_seconds_by_peer;
  std::size_t parameters = 0;  ///< m, floats
  std::size_t batch_size = 0;
  std::vector<sync::LayerPlan> plan;
  std::map<std::string, double> sync;  ///< SyncStage::summary(): strategy-level figures
  std::vector<double> epoch_test_accuracy;
  std::vector<double> epoch_train_loss;
  /// Per evaluation, a user's named metrics (test_metrics of each epoch); empty maps without any.
  std::vector<std::map<std::string, double>> epoch_test_metrics;
  /// Per evaluation (one per epoch, the last epoch possibly cut by job.max_iterations): seconds
  /// from the start of the first iteration to the end of that evaluation (wall clock), and the
  /// training-only seconds up to it (evaluations excluded), so progress can be plotted over time.
  std::vector<double> epoch_wall_seconds;
  std::vector<double> epoch_train_seconds;
  /// Per epoch, the sync stage's per-layer figures (SyncStage::epoch_figures(); docs/metrics.md).
  std::vector<std::map<std::string, double>> epoch_sync;
};

/// What a node that stopped on an error writes (issue 59): DIR/failed-node-<rank>.json, so that
/// scripts never take it for node-<rank>.json, a finished job's file. Plain value type.
struct FailedRun {
  std::size_t rank = 0;         ///< this node's rank in the view it stopped in
  std::size_t nodes = 1;        ///< that view's node count
  std::string job;              ///< job.name
  std::string strategy;         ///< sync.strategy
  std::string error;            ///< the error it stopped on, as logged
  std::uint64_t iteration = 0;  ///< iterations done over the job when it stopped
  std::size_t view = 0;         ///< the membership view it stopped in
  std::string view_id;          ///< that view's MembershipView::id ("" in view 0)
  std::size_t rollbacks = 0;    ///< rollbacks before it
  /// The node's totals over every view of the job (FaultCounters: the last view's plus
  /// MembershipView::earlier_views).
  FaultCounters counters;
};

/// Writes `failed` as JSON to `dir`/failed-node-<rank><tag>.json (`tag`:
/// MembershipView::file_tag()), creating `dir`: "rank", "nodes", "job", "strategy", "error",
/// "iteration", "view", "view_id", "rollbacks", "malformed_frames", "rejected_connections",
/// "unverified_frames", "rejected_messages". Its name is outside the node-*.json that scripts
/// read as finished runs. Throws gradmesh::Error naming the path when it cannot be written.
void write_failed_run(const std::filesystem::path& dir, const FailedRun& failed,
                      std::string_view tag = {});

/// Writes `metrics` as JSON to `dir`/node-<rank>.json, creating `dir`. Throws gradmesh::Error
/// naming the path when it cannot be written.
/// `tag` (MembershipView::file_tag()): "" or ".view-<k>-<id>" after node-<rank>, for a node
/// that ends in a view that is not a majority.
void write_metrics(const std::filesystem::path& dir, const NodeMetrics& metrics,
                   std::string_view tag = {});

/// The plan's summary for `gradmesh-node plan`: the planner's inputs (alpha, B, GEMM rate), the
/// predicted bytes and iteration time, the buckets, the KV chunk and each lane's byte budget; for
/// other strategies (Ako) their figures. `measured`: whether layer times and GEMM were measured.
[[nodiscard]] std::string format_summary(const std::map<std::string, double>& summary,
                                         bool measured);

/// The per-layer plan as a table for the terminal (`gradmesh-node plan`).
[[nodiscard]] std::string format_plan(const std::vector<sync::LayerPlan>& plan);

}  // namespace gradmesh::app
