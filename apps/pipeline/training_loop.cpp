#include "apps/pipeline/training_loop.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include <spdlog/spdlog.h>

#include "apps/pipeline/non_finite_error.h"
#include "apps/pipeline/run_report.h"
#include "apps/recovery/join_admission.h"
#include "apps/recovery/join_request.h"
#include "apps/recovery/resume_point.h"

namespace gradmesh::app::detail {

TrainingLoop::TrainingLoop(const NodeIdentity& job, const ProgramParts& program, Replica& replica,
                           Runtime& runtime, TrainingPlan& plan, Recovery& recovery)
    : job_(job),
      program_(program),
      replica_(replica),
      runtime_(runtime),
      plan_(plan),
      recovery_(recovery),
      console_(stdout, job.progress_style),
      recorder_(metrics_),
      observers_{&console_, &recorder_} {
  observers_.insert(observers_.end(), program.observers.begin(), program.observers.end());
}

void TrainingLoop::prepare() {
  try {
    for (auto& [name, state] : program_.own_states) recovery_.checkpoints.add(name, *state);
    if (recovery_.resume) {
      if (recovery_.resume->resplit_from_nodes != 0)
        adapt_resplit(*recovery_.resume, plan_.graph->iterations_per_epoch(), *plan_.stage);
      recovery_.checkpoints.load(recovery_.resume->checkpoint, recovery_.resume->source);
      recovery_.resume->checkpoint = Checkpoint{};  // its sections are loaded: free them
    }
    if (job_.options.rejoin) {
      // A live peer's replica and clock: this node goes on from its iteration (the data cursor
      // is a pure function of the iteration number, so it lands in the same epoch and batch).
      plan_.graph->continue_from(plan_.stage->join());
    }
  } catch (const std::exception& e) {
    abort_peers(runtime_.transport.get(), e);
    throw;
  }
}

NodeMetrics TrainingLoop::run() {
  prepare();
  const JobConfig& config = job_.config;
  net::Transport* transport = runtime_.transport.get();
  start_ = done_ = plan_.graph->iterations();
  per_epoch_ = plan_.graph->iterations_per_epoch();
  limit_ =
      std::min<std::uint64_t>(per_epoch_ * config.job.epochs,
                              config.job.max_iterations.value_or(per_epoch_ * config.job.epochs));
  spdlog::info("{} parameters, batch {} per node, {} iterations per epoch, {} iterations in all",
               replica_.model->parameter_count(), config.optimizer.batch_size, per_epoch_, limit_);
  // The rate of each iteration is a function of its number alone: the same on every node, and
  // after a resume (a resume with other job.epochs stretches a cosine schedule).
  schedule_ = tasks::LrSchedule{tasks::parse_lr_schedule(config.optimizer.schedule),
                                static_cast<float>(config.optimizer.lr), limit_};
  if (schedule_.kind != tasks::LrScheduleKind::kConstant) {
    spdlog::info("learning rate: {} schedule from {} over {} iterations", config.optimizer.schedule,
                 config.optimizer.lr, limit_);
  }
  synchronize_batch_norm();
  const RunStart run_start{
      job_.rank,           start_,
      per_epoch_,          limit_,
      config.job.epochs,   job_.options.resume.has_value(),
      job_.options.rejoin, recovery_.resume ? recovery_.resume->source : std::string()};
  for (RunObserver* o : observers_) o->on_start(run_start);

  started_ = Clock::now();
  try {
    for (std::size_t epoch = done_ / per_epoch_; done_ < limit_; ++epoch) run_epoch(epoch);
    finish_checkpoint_write();
    finish();
    plan_.stage->check_quorum();  // a node cut off from the job (Ako) writes no metrics
  } catch (const ViewGrowth&) {
    // Every node stops here, at the same boundary, its checkpoint on disk: a clean close, so no
    // peer takes it for failed; run_with_recovery() starts the grown view.
    if (transport) transport->shutdown(10.0);
    throw;
  } catch (const NonFiniteError& e) {
    // Under a BSP strategy every node stepped the same summed update (or received the same
    // parameters) and stops on its own finding at this same iteration: a clean close, so none
    // takes another for failed (nor rolls back without it) and each names what it found. Under
    // Ako the replicas differ: the peers learn why this one stops. A checkpoint under way (of an
    // earlier, finite iteration) is finished first: a rollback reads it.
    try {
      finish_checkpoint_write();
    } catch (const std::exception& write) {
      spdlog::error("{}", write.what());
    }
    if (sync::strategy_traits(job_.config.sync.strategy).bsp) {
      if (transport) transport->shutdown(10.0);
    } else {
      abort_peers(transport, e);
    }
    throw;
  } catch (const std::exception& e) {
    abort_peers(transport, e);
    throw;
  }
  metrics_.wall_seconds = std::chrono::duration<double>(Clock::now() - started_).count();
  metrics_.train_seconds = train_seconds_;

  if (transport) transport->shutdown(10.0);
  const CompletedRun run{transport,
                         *plan_.stage,
                         *replica_.model,
                         config,
                         job_.options,
                         job_.membership,
                         job_.rank,
                         job_.nodes(),
                         config.optimizer.batch_size,
                         start_,
                         done_,
                         train_seconds_,
                         job_.progress_style};
  complete_metrics(metrics_, run);
  report_run(metrics_, run, runtime_.trace.get());
  return std::move(metrics_);
}

void TrainingLoop::run_epoch(std::size_t epoch) {
  const JobConfig& config = job_.config;
  double loss_sum = 0;
  const std::uint64_t first = done_ % per_epoch_;  // > 0 only in the epoch a resume lands in
  std::uint64_t in_epoch = first;
  const auto epoch_start = Clock::now();
  const double sent_at_start = bytes_sent();
  const std::uint64_t epoch_iterations =
      std::min<std::uint64_t>(per_epoch_, first + (limit_ - done_));
  while (in_epoch < epoch_iterations) {
    const bool first_step = done_ == start_;  // this process's first (after a resume too)
    const auto step_start = first_step ? Clock::now() : Clock::time_point{};
    replica_.optimizer->set_lr(schedule_.at(done_));
    replica_.optimizer->set_step(done_ + 1);  // Adam's bias correction: this iteration, 1-based
    if (statistics_gather_) statistics_gather_->begin_iteration(done_);
    const float loss = plan_.graph->step();
    if (replica_.optimizer->non_finite_check()) check_finite(loss);
    loss_sum += loss;
    if (first_step) {
      metrics_.first_iteration_seconds =
          std::chrono::duration<double>(Clock::now() - step_start).count();
    }
    ++in_epoch;
    ++done_;
    if (checkpoint_due(in_epoch)) {
      write_checkpoint(done_);
      // Restarted nodes come back at a checkpoint boundary; at an epoch's end after its
      // evaluation (the boundary is the same on every node: BSP).
      if (in_epoch < epoch_iterations)
        admit_rejoins(done_, done_ == limit_);
      else
        admit_at_epoch_end_ = true;
    }
    report_progress(epoch, first, in_epoch, epoch_iterations, epoch_start, sent_at_start);
    if (done_ < limit_ && plan_.stage->ended()) {
      spdlog::info("the job ended for this node at iteration {} of {}: {} (sync.strategy = {})",
                   done_, limit_, "a quorum of its nodes has ended", config.sync.strategy);
      limit_ = done_;
      break;
    }
  }
  train_seconds_ += std::chrono::duration<double>(Clock::now() - epoch_start).count();
  std::map<std::string, double> figures = plan_.stage->epoch_figures();
  plan_.stage->pause(true);
  const auto evaluation = evaluate();
  plan_.stage->pause(false);
  const EpochEnd epoch_end{
      job_.rank,
      epoch + 1,
      config.job.epochs,
      done_,
      loss_sum / static_cast<double>(std::max<std::uint64_t>(1, in_epoch - first)),
      evaluation,
      static_cast<double>((done_ - start_) * config.optimizer.batch_size) /
          std::max(train_seconds_, 1e-9),
      bytes_sent(),
      std::chrono::duration<double>(Clock::now() - started_).count(),
      train_seconds_,
      std::move(figures)};
  for (RunObserver* o : observers_) o->on_epoch_end(epoch_end);
  if (admit_at_epoch_end_) {
    admit_at_epoch_end_ = false;
    admit_rejoins(done_, done_ == limit_);
  }
}

void TrainingLoop::check_finite(float loss) {
  tasks::NonFiniteGuard& guard = replica_.optimizer->non_finite();
  const bool loss_finite = std::isfinite(loss);
  if (loss_finite && !guard.tripped()) return;
  const JobConfig& config = job_.config;
  const std::uint64_t iteration = done_ + 1;  // 1-based: this iteration's
  std::string what = "non-finite values at iteration " + std::to_string(iteration) + " (epoch " +
                     std::to_string(done_ / per_epoch_ + 1) + ") on rank " +
                     std::to_string(job_.rank) + " (" + job_.peers[job_.rank].address() + "): ";
  const std::optional<tasks::NonFiniteFinding> found = guard.first();
  if (found) {
    const tasks::Model& model = *replica_.model;
    const std::size_t layer = model.layer_at_offset(found->offset);
    const std::size_t begin = found->offset - model.parameter_offset(layer);
    what +=
        fmt::format("{} of layer {} ({}, floats [{}, {}) of its parameters) held {} NaN and {} Inf",
                    found->what, layer, model.layer_name(layer), begin, begin + found->size,
                    found->nan, found->inf);
    what += fmt::format("; the training loss was {}{}", loss_finite ? "finite, " : "", loss);
  } else {
    what += fmt::format("the training loss is {}", loss) +
            " while every update of the model so far was finite (a bad input batch, or an "
            "overflow in the forward pass)";
  }
  const bool rolls_back = config.job.on_nonfinite == "rollback" &&
                          job_.membership.nonfinite_rollbacks == 0 &&
                          !job_.membership.join_root.empty();
  if (rolls_back) {
    what +=
        ". job.on_nonfinite = \"rollback\": every node goes back to the newest checkpoint "
        "once; a second non-finite value stops the job";
  } else {
    what += job_.membership.nonfinite_rollbacks > 0
                ? ". It recurred after the job rolled back to its newest checkpoint: the job stops"
                : ". The job stops (job.on_nonfinite = \"" + config.job.on_nonfinite + "\")";
    const bool sealed = !config.security.secret_file.empty() && config.security.encrypt;
    what += fmt::format(". Try a lower optimizer.lr (now {})", schedule_.at(done_)) +
            (job_.nodes() > 1 && !sealed
                 ? ", security.secret_file with security.encrypt = true (frames sealed: a "
                   "corrupted frame is refused, not summed)"
                 : "") +
            ", or sync.compression.method = \"none\" to rule out a compressor's error";
  }
  throw NonFiniteError(what, iteration, rolls_back);
}

void TrainingLoop::report_progress(std::size_t epoch, std::uint64_t first, std::uint64_t in_epoch,
                                   std::uint64_t epoch_iterations, Clock::time_point epoch_start,
                                   double sent_at_start) {
  const bool last = in_epoch == epoch_iterations;
  const auto due = [last](const RunObserver* o) { return o->progress_due(last); };
  if (std::none_of(observers_.begin(), observers_.end(), due)) return;
  const double seconds =
      std::max(std::chrono::duration<double>(Clock::now() - epoch_start).count(), 1e-9);
  const ProgressSnapshot snapshot{
      job_.rank,
      epoch + 1,
      job_.config.job.epochs,
      in_epoch,
      epoch_iterations,
      static_cast<double>((in_epoch - first) * job_.config.optimizer.batch_size) / seconds,
      (bytes_sent() - sent_at_start) / 1e6 / seconds,
      seconds};
  for (RunObserver* o : observers_) {
    if (due(o)) o->on_progress(snapshot);
  }
}

bool TrainingLoop::checkpoint_due(std::uint64_t in_epoch) const {
  if (!recovery_.checkpoint_writer) return false;
  if (done_ == limit_) return true;
  const auto& every = job_.config.checkpoint.every;
  return every ? done_ % *every == 0 : in_epoch == per_epoch_;
}

void TrainingLoop::write_checkpoint(std::uint64_t iteration) {
  plan_.stage->check_quorum();  // a node cut off from the job writes nothing into its folder
  const CheckpointWriter::Saved saved =
      recovery_.checkpoint_writer->save(iteration, recovery_.checkpoints);
  metrics_.checkpoint_write_seconds += saved.previous_write_seconds;
  ++metrics_.checkpoints_written;
  metrics_.checkpoint_bytes = saved.bytes;
  metrics_.checkpoint_seconds += saved.seconds;
}

void TrainingLoop::finish_checkpoint_write() {
  if (recovery_.checkpoint_writer)
    metrics_.checkpoint_write_seconds += recovery_.checkpoint_writer->finish();
}

void TrainingLoop::admit_rejoins(std::uint64_t iteration, bool last) {
  const std::filesystem::path& root = job_.membership.join_root;
  if (root.empty()) return;
  std::vector<JoinRequest> joiners =
      admit_join_requests(root, job_.addresses(), job_.rank, job_.membership.view, iteration, last,
                          *runtime_.agreement);
  if (joiners.empty()) return;
  std::string who;
  for (const JoinRequest& j : joiners) who += (who.empty() ? "" : ", ") + j.address;
  spdlog::warn(
      "{} restarted and asked to rejoin: every node stops at the checkpoint of iteration "
      "{} and goes on from it with {} nodes",
      who, iteration, job_.nodes() + joiners.size());
  finish_checkpoint_write();  // on disk before any node of the grown view reads it
  throw ViewGrowth(iteration, std::move(joiners));
}

std::optional<tasks::Model::Evaluation> TrainingLoop::evaluate() {
  if (!program_.evaluate && program_.test_set == nullptr) return std::nullopt;
  tasks::Model& model = *replica_.model;
  const bool training = model.training();
  model.set_training(false);
  const auto result = program_.test_set ? evaluate_test_set(model) : program_.evaluate(model);
  model.set_training(training);
  check_metric_names(result);
  return result;
}

tasks::Model::Evaluation TrainingLoop::evaluate_test_set(tasks::Model& model) {
  const tasks::Dataset& test = *program_.test_set;
  const std::size_t n = job_.nodes();
  const bool split = one_model_on_nodes();
  if (!split) return model.evaluate(test);
  if (!test_share_) {
    const std::size_t begin = test.count * job_.rank / n, end = test.count * (job_.rank + 1) / n;
    test_share_ = tasks::take_range(test, begin, end - begin);
    // The same text on every node (gradmesh-launch prints it once); the share in the debug log.
    spdlog::info(
        "evaluation split over the {} nodes: rank r scores test examples [r N / n, (r + 1) "
        "N / n) of the N = {}",
        n, test.count);
    spdlog::debug("this node scores test examples [{}, {}) of {}", begin, end, test.count);
  }
  const tasks::Model::Evaluation mine = model.evaluate(*test_share_);
  const auto count = static_cast<double>(test_share_->count);
  const std::array<std::uint64_t, 3> figures{
      std::bit_cast<std::uint64_t>(mine.loss * count),
      static_cast<std::uint64_t>(std::llround(mine.accuracy * count)), test_share_->count};
  const auto lists = runtime_.agreement->exchange_evaluation(figures, ++evaluation_round_);
  double loss = 0;
  std::uint64_t correct = 0, total = 0;
  for (std::size_t r = 0; r < lists.size(); ++r) {  // rank order: the same sums on every node
    if (lists[r].size() != figures.size()) {
      throw PeerError(r, job_.addresses().at(r),
                      "sent " + std::to_string(lists[r].size()) +
                          " evaluation figures, expected 3 (loss sum, correct, examples)");
    }
    loss += std::bit_cast<double>(lists[r][0]);
    correct += lists[r][1];
    total += lists[r][2];
  }
  if (total != test.count) {
    throw DataError("the nodes' shares of the test set add up to " + std::to_string(total) +
                    " examples, this node's test set has " + std::to_string(test.count) +
                    ": every node must evaluate the same test set (data.test_limit)");
  }
  const auto examples = static_cast<double>(total);
  return {loss / examples, static_cast<double>(correct) / examples};
}

void TrainingLoop::finish() {
  // The stage completes its exchange; an asynchronous one (Ako) then folds in every peer's last
  // updates, which changes this replica: evaluate that final model too. A BSP job's replicas are
  // one model but for the nodes' own batch-normalization statistics: averaged, the final model
  // is one model; score it.
  const char* what = nullptr;
  const auto finish_start = Clock::now();
  if (plan_.stage->finish()) {
    what = "after the final exchange";
  } else if (average_layer_states()) {
    what = "with the running statistics averaged over the nodes";
  }
  metrics_.finish_seconds = std::chrono::duration<double>(Clock::now() - finish_start).count();
  const auto final_evaluation = what != nullptr ? evaluate() : std::nullopt;
  if (!final_evaluation) {  // the last epoch's figures stand (none without an evaluation)
    metrics_.final_test_accuracy = metrics_.test_accuracy;
    metrics_.final_test_loss = metrics_.test_loss;
    metrics_.final_test_metrics = metrics_.test_metrics;
    return;
  }
  metrics_.final_test_accuracy = final_evaluation->accuracy;
  metrics_.final_test_loss = final_evaluation->loss;
  metrics_.final_test_metrics.clear();
  metrics_.final_test_metrics.insert(final_evaluation->metrics.begin(),
                                     final_evaluation->metrics.end());
  spdlog::info("{}: test accuracy {:.2f}%", what, 100.0 * final_evaluation->accuracy);
}

bool TrainingLoop::one_model_on_nodes() const {
  return job_.nodes() > 1 && runtime_.agreement &&
         sync::strategy_traits(job_.config.sync.strategy).bsp;
}

bool TrainingLoop::average_layer_states() {
  tasks::Model& model = *replica_.model;
  const std::size_t n = job_.nodes();
  // Under SyncBN the running statistics agree already (every node's the global batch's).
  if (!one_model_on_nodes() || model.layer_state_size() == 0 || statistics_gather_) return false;
  std::vector<float> mine(model.layer_state_size());
  model.save_layer_states(mine);
  const auto all = runtime_.agreement->exchange_layer_states(mine, 1);
  std::vector<double> sum(mine.size(), 0.0);
  for (std::size_t r = 0; r < all.size(); ++r) {  // rank order: the same bits on every node
    if (all[r].size() != mine.size()) {
      throw PeerError(r, job_.addresses().at(r),
                      "sent " + std::to_string(all[r].size()) + " layer-state floats, expected " +
                          std::to_string(mine.size()) + " (the same model on every node)");
    }
    for (std::size_t i = 0; i < mine.size(); ++i) sum[i] += all[r][i];
  }
  for (std::size_t i = 0; i < mine.size(); ++i)
    mine[i] = static_cast<float>(sum[i] / static_cast<double>(all.size()));
  model.load_layer_states(mine);
  spdlog::info("batch normalization's running statistics averaged over the {} nodes ({} floats)", n,
               mine.size());
  return true;
}

TrainingLoop::~TrainingLoop() {
  if (statistics_gather_) attach_statistics_gather(nullptr);
}

std::size_t TrainingLoop::attach_statistics_gather(tasks::BatchStatisticsExchange* gather) {
  std::size_t layers = 0;
  if (!replica_.model) return 0;
  for (std::size_t l = 0; l < replica_.model->num_layers(); ++l) {
    if (auto* bn = dynamic_cast<tasks::BatchNorm*>(&replica_.model->layer(l))) {
      bn->set_statistics_exchange(gather);
      ++layers;
    }
  }
  return layers;
}

void TrainingLoop::synchronize_batch_norm() {
  // A strategy whose replicas differ (ako) is refused with the config (check_optimizer_keys).
  if (!job_.config.model.sync_batch_norm || !one_model_on_nodes()) return;
  statistics_gather_.emplace(*runtime_.agreement, job_.nodes());
  const std::size_t layers = attach_statistics_gather(&*statistics_gather_);
  if (layers == 0) {
    statistics_gather_.reset();
    spdlog::warn("model.sync_batch_norm = true, but the model has no batch_norm layer");
    return;
  }
  spdlog::info(
      "batch normalization synchronized over the {} nodes (SyncBN): {} layer(s), 2 gathers each an "
      "iteration",
      job_.nodes(), layers);
}

void TrainingLoop::StatisticsGather::all_gather(std::span<const float> mine, std::span<float> all) {
  GRADMESH_CHECK_LT(call_, std::uint64_t{1} << 16, "SyncBN: gathers in one iteration");
  agreement_.exchange_batch_statistics(mine, (iteration_ << 16) + call_++, all);
}

double TrainingLoop::bytes_sent() const {
  return runtime_.transport ? static_cast<double>(runtime_.transport->counters().bytes_sent) : 0.0;
}

}  // namespace gradmesh::app::detail
