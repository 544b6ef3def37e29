#pragma once
// The training loop of a built node (internal to apps/pipeline; Pipeline::run()): the epochs and
// their iterations, the learning-rate schedule, the evaluations, the checkpoints at their
// boundaries and the restarted nodes taken back there, the observers told of each, the
// strategy's final exchange, and the report at the end.

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "apps/node/metrics.h"
#include "apps/pipeline/node_state.h"
#include "apps/pipeline/run_observer.h"
#include "tasks/layers/batch_norm.h"
#include "tasks/model.h"
#include "tasks/optim/lr_schedule.h"

namespace gradmesh::app::detail {

/// Runs a built node once (Pipeline::run(), whose docstring says what a run does), on the parts
/// of its NodeState it uses: it reads who the node is and what the program gave, steps the
/// replica through the plan's graph and stage, talks to the peers through the runtime's
/// transport and resume agreement, and loads and saves the recovery's checkpoints.
///
/// Thread safety: none (the node's thread). Errors: a task's error, PeerError naming a peer,
/// CheckpointError naming a path, ViewGrowth when restarted nodes are taken back (after a clean
/// close of the transport); on any other error the peers are told why this node stops.
class TrainingLoop {
 public:
  /// The parts must outlive the loop; program.observers (the program's own, told after the
  /// console's and the metrics') must outlive run().
  TrainingLoop(const NodeIdentity& job, const ProgramParts& program, Replica& replica,
               Runtime& runtime, TrainingPlan& plan, Recovery& recovery);
  /// Detaches SyncBN's gather from the model's layers (the model may outlive the loop).
  ~TrainingLoop();
  TrainingLoop(const TrainingLoop&) = delete;
  TrainingLoop& operator=(const TrainingLoop&) = delete;

  /// Trains from the resumed (or rejoined, or first) iteration to the job's last and returns the
  /// node's metrics. Call once.
  NodeMetrics run();

 private:
  using Clock = std::chrono::steady_clock;

  /// Loads the agreed checkpoint (--resume) or a live peer's state (--rejoin under ako).
  void prepare();
  /// One epoch from iteration `done_`: its iterations, checkpoints, progress, evaluation and end.
  void run_epoch(std::size_t epoch);
  /// The non-finite guard after an iteration's step (Optimizer::non_finite_check(), on unless
  /// job.on_nonfinite = "off"): throws
  /// NonFiniteError when `loss` is NaN or Inf or the optimizer's guard found a non-finite update
  /// (tasks::NonFiniteGuard), naming this node, the iteration, the layer and what to try.
  void check_finite(float loss);
  /// The observers' progress, when one of them wants it now.
  void report_progress(std::size_t epoch, std::uint64_t first, std::uint64_t in_epoch,
                       std::uint64_t epoch_iterations, Clock::time_point epoch_start,
                       double sent_at_start);
  /// Whether a checkpoint is due after `in_epoch` iterations of the epoch (checkpoint.every, else
  /// each epoch's end, and after the last iteration).
  [[nodiscard]] bool checkpoint_due(std::uint64_t in_epoch) const;
  /// Saves the checkpoint of `iteration` and starts its write (CheckpointWriter).
  void write_checkpoint(std::uint64_t iteration);
  /// Waits for the checkpoint write under way; rethrows its CheckpointError.
  void finish_checkpoint_write();
  /// At a checkpoint boundary (membership().join_root set): throws ViewGrowth when the nodes take
  /// restarted ones back (apps/recovery/join_admission.h).
  void admit_rejoins(std::uint64_t iteration, bool last);
  /// The evaluation (set_test_set, set_evaluation), with the model in evaluation mode; none when
  /// neither is set.
  [[nodiscard]] std::optional<tasks::Model::Evaluation> evaluate();
  /// set_test_set()'s evaluation: this node's share under a BSP strategy, the shares' figures
  /// all-gathered; the whole set under ako or on one node.
  [[nodiscard]] tasks::Model::Evaluation evaluate_test_set(tasks::Model& model);
  /// The evaluation after the strategy's final exchange (or, under a BSP strategy, after the
  /// layer states' average), into the metrics.
  void finish();
  /// Under a BSP strategy on several nodes, for a model with layer states (batch normalization's
  /// running statistics, per node while training, as DDP's): replaces them by their mean over
  /// the nodes (all-gathered, summed in rank order in double), so the final model is one model
  /// on every node. Returns whether it did. Throws PeerError for a failed or silent peer.
  bool average_layer_states();
  /// Several nodes whose replicas are one model (a BSP strategy's traits), with the agreement's
  /// gathers to exchange on: the split evaluation and the states' average apply.
  [[nodiscard]] bool one_model_on_nodes() const;
  /// model.sync_batch_norm on several nodes of a BSP strategy: hands every batch_norm layer the
  /// agreement's gather (SyncBN).
  void synchronize_batch_norm();
  /// Hands `gather` (nullptr: none) to every batch_norm layer; returns how many there are.
  std::size_t attach_statistics_gather(tasks::BatchStatisticsExchange* gather);
  [[nodiscard]] double bytes_sent() const;

  const NodeIdentity& job_;
  const ProgramParts& program_;
  Replica& replica_;
  Runtime& runtime_;
  TrainingPlan& plan_;
  Recovery& recovery_;
  NodeMetrics metrics_;
  ConsoleReporter console_;
  MetricsRecorder recorder_;
  std::vector<RunObserver*> observers_;  // the console, the recorder, then the program's own
  std::uint64_t start_ = 0;              // > 0 after a resume or a rejoin
  std::uint64_t done_ = 0;
  std::uint64_t per_epoch_ = 1;
  std::uint64_t limit_ = 0;  // the job's last iteration
  tasks::LrSchedule schedule_;
  Clock::time_point started_;
  double train_seconds_ = 0;  // iterations only: samples/s never counts evaluation
  bool admit_at_epoch_end_ = false;
  std::optional<tasks::Dataset> test_share_;  // this node's share of the test set (split)
  std::uint64_t evaluation_round_ = 0;        // the split evaluation's exchanges so far

  /// SyncBN's gathers over the agreement, in rounds (iteration << 16) + the call's index within
  /// the iteration: the same on every node, and after a resume or a rejoin.
  class StatisticsGather final : public tasks::BatchStatisticsExchange {
   public:
    StatisticsGather(sync::ResumeAgreement& agreement, std::size_t nodes)
        : agreement_(agreement), nodes_(nodes) {}
    /// Before iteration `iteration`'s forward.
    void begin_iteration(std::uint64_t iteration) {
      iteration_ = iteration;
      call_ = 0;
    }
    void all_gather(std::span<const float> mine, std::span<float> all) override;
    [[nodiscard]] std::size_t nodes() const noexcept override { return nodes_; }

   private:
    sync::ResumeAgreement& agreement_;
    std::size_t nodes_;
    std::uint64_t iteration_ = 0;
    std::uint64_t call_ = 0;
  };
  std::optional<StatisticsGather> statistics_gather_;  // model.sync_batch_norm on several nodes
};

}  // namespace gradmesh::app::detail
