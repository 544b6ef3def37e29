#pragma once
// What a run reports as it goes (issue 27: reporting as observers of the training loop): the
// start, the progress within an epoch, each epoch's end. The console's progress bar and epoch
// lines and the metrics' per-epoch figures are two observers; a program may add its own
// (Pipeline::add_observer). The trace of every task is the engine's observer
// (engine::TraceRecorder); the metrics file is written at the end (apps/pipeline/run_report.h).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "apps/node/metrics.h"
#include "apps/pipeline/progress.h"
#include "tasks/model.h"

namespace gradmesh::app {

/// Where a run stands when its first iteration is about to run.
struct RunStart {
  std::size_t rank = 0;
  std::uint64_t start = 0;      ///< iterations done before this process's first (> 0 after a
                                ///< resume or a rejoin)
  std::uint64_t per_epoch = 1;  ///< iterations per epoch
  std::uint64_t limit = 0;      ///< the job's last iteration (job.epochs, job.max_iterations)
  std::size_t epochs = 1;       ///< job.epochs
  bool resumed = false;         ///< --resume: from `resume_source`
  bool rejoined = false;        ///< --rejoin under ako: from a live peer's replica
  std::string resume_source;    ///< the checkpoint file resumed from
};

/// One epoch's end, after its evaluation.
struct EpochEnd {
  std::size_t rank = 0;
  std::size_t epoch = 1;   ///< 1-based
  std::size_t epochs = 1;  ///< job.epochs
  std::uint64_t done = 0;  ///< iterations done in the job
  double train_loss = 0;   ///< mean over this epoch's iterations run here
  std::optional<tasks::Model::Evaluation> evaluation;  ///< none without an evaluation
  double samples_per_second = 0;  ///< this process's training so far (evaluation left out)
  double bytes_sent = 0;          ///< by this node so far, bytes
  double wall_seconds = 0;        ///< since the run began
  double train_seconds = 0;       ///< in iterations since the run began
  /// The sync stage's per-layer figures of this epoch (SyncStage::epoch_figures(): a compressed
  /// layer's "compression_error.<layer>", "residual_ratio.<layer>"); empty for most stages.
  std::map<std::string, double> sync_figures;
};

/// Throws gradmesh::ContractError when a user's evaluation (tasks::Model::Evaluation::metrics)
/// names a metric badly: empty, characters other than ASCII letters, digits, '_', '.' and '-',
/// "loss" or "accuracy" (Evaluation's own fields), or one name twice. Reentrant.
void check_metric_names(const tasks::Model::Evaluation& e);

/// Told of a run's progress, on the pipeline's thread, between iterations (never while the
/// iteration graph runs). An observer must not throw; it may be slow only at an epoch's end.
class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void on_start(const RunStart& start) { (void)start; }
  /// Whether on_progress() would use a snapshot now (cheap: the loop builds one only then);
  /// `last`: the epoch's last iteration.
  [[nodiscard]] virtual bool progress_due(bool last) const {
    (void)last;
    return false;
  }
  virtual void on_progress(const ProgressSnapshot& snapshot) { (void)snapshot; }
  virtual void on_epoch_end(const EpochEnd& end) { (void)end; }

 protected:
  RunObserver() = default;
  RunObserver(const RunObserver&) = default;
  RunObserver& operator=(const RunObserver&) = default;
};

/// Watches error feedback for divergence (issue 28: "a warning when the residual grows without
/// bound"), from each epoch's sync figures. Error feedback keeps the residual bounded by a
/// multiple of the largest gradient (Karimireddy et al., ICML'19, Lemma 3; Stich et al.,
/// NeurIPS'18, Lemma 3.2), and gradients shrink as training goes on, so a compressed layer's
/// mean residual norm ("residual_norm.<layer>") that grows by kGrowth or more an epoch over
/// kEpochs epochs in a row (8x in all), by kJump or more in one epoch, or is not finite, is
/// diverging: a learning rate too large for what the compressor keeps (random-k at 1% with the
/// demo MLP's momentum 0.9: 1.1e3 after the first epoch, 2.7e8 after the second;
/// docs/compression.md). Each layer is reported once. Thread safety: none. Pure.
class ResidualWatch {
 public:
  static constexpr double kGrowth = 2.0;
  static constexpr std::size_t kEpochs = 3;
  static constexpr double kJump = 100.0;
  /// The epoch's figures (SyncStage::epoch_figures()); returns a warning for each layer found
  /// diverging now ("layer dense2: error-feedback residual norm 0.1 -> ... over 4 epochs: ..."),
  /// empty when none. Layers without a "residual_norm." figure this epoch are left as they were.
  [[nodiscard]] std::vector<std::string> epoch(const std::map<std::string, double>& figures);

 private:
  struct Layer {
    std::vector<double> norms;  // the last kEpochs + 1 epochs' residual norms
    bool reported = false;
  };
  std::map<std::string, Layer> layers_;
};

/// The console's view of a run, as gradmesh-node prints it on `out`: a line when it resumed or
/// rejoined, the progress bar (ProgressReporter: redrawn on a terminal, a plain line now and then
/// elsewhere), and one line per epoch ("[rank 0] epoch 1/5  iter 938  loss 0.5123  test
/// accuracy 84.20%  41000 samples/s  12.3 MB sent"), ending with the largest compression error
/// of a compressing stage, then a warning line for each layer whose error feedback diverges
/// (ResidualWatch). Thread safety: none.
class ConsoleReporter final : public RunObserver {
 public:
  /// `style`: the progress's (ProgressStyle::kRecords also writes each epoch's end as a record,
  /// "@gradmesh epoch {json}": rank, epoch, epochs, done, loss, accuracy (null without an
  /// evaluation), samples_per_second, bytes_sent, compression_error (null unless compressed),
  /// for gradmesh-launch's console, instead of the epoch line).
  explicit ConsoleReporter(std::FILE* out, ProgressStyle style = ProgressStyle::kLines,
                           double plain_every_seconds = 30.0)
      : out_(out), progress_(out, style, plain_every_seconds) {}
  void on_start(const RunStart& start) override;
  [[nodiscard]] bool progress_due(bool last) const override { return progress_.due(last); }
  void on_progress(const ProgressSnapshot& snapshot) override { progress_.update(snapshot); }
  void on_epoch_end(const EpochEnd& end) override;

 private:
  std::FILE* out_;
  ProgressReporter progress_;
  ResidualWatch residuals_;
};

/// Records each epoch's figures into `metrics` (which must outlive it): epochs, train_loss,
/// test_accuracy and test_loss (0 without an evaluation), and the per-epoch series
/// (epoch_train_loss, epoch_test_accuracy, epoch_wall_seconds, epoch_train_seconds). Thread
/// safety: none.
class MetricsRecorder final : public RunObserver {
 public:
  explicit MetricsRecorder(NodeMetrics& metrics) : metrics_(metrics) {}
  void on_epoch_end(const EpochEnd& end) override;

 private:
  NodeMetrics& metrics_;
};

}  // namespace gradmesh::app
