// Strategy local's state in checkpoints (LocalStage::save_state, load_state; local_stage.h,
// "Checkpoints"): theta_round_start, the outer velocities and residuals, the round's position and
// the exchange in flight, and a re-split by replica onto another node count.

#include <algorithm>
#include <string>

#include <spdlog/spdlog.h>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "sync/local/local_stage.h"

namespace gradmesh::sync {

void LocalStage::save_state(engine::StateWriter& out) {
  out.write_u64(schedule_.steps);
  out.write_u64(in_round_);
  out.write_u64(fragments_.size());
  out.write_floats(start_);
  for (Fragment& f : fragments_) {
    f.outer.save_state(out);
    engine::Checkpointable* residual = f.exchange ? f.exchange->residual() : nullptr;
    out.write_u64(residual != nullptr ? 1 : 0);
    if (residual != nullptr) residual->save_state(out);
  }
  out.write_u64(static_cast<std::uint64_t>(options_.overlap));
  if (overlapped()) {
    drain();  // the exchanges in flight are saved as their means
    out.write_floats(round_start_);
    for (const Fragment& f : fragments_) {
      out.write_u64(f.pending ? 1 : 0);
      if (f.pending) out.write_floats(std::span(delta_).subspan(f.begin, f.end - f.begin));
    }
    if (options_.overlap == OverlapKind::kEager) out.write_floats(own_);
  }
}

void LocalStage::prepare_resplit(std::size_t old_nodes, bool copied) {
  resplit_copy_ = copied;
  spdlog::info("local: resuming {} of a {}-node job's replicas{}", copied ? "a copy of one" : "one",
               old_nodes,
               copied ? " (its outer state too; its error-feedback residual, the old node's own, "
                        "starts at zero here)"
                      : "");
}

void LocalStage::adopt_steps(std::size_t steps) {
  spdlog::info(
      "local: the checkpoint's rounds are of H = {} inner steps (this job's start-up chose {}): "
      "sync.local.steps = auto keeps H = {} so the round under way ends where it would have",
      steps, schedule_.steps, steps);
  schedule_.steps = steps;
  schedule_.utilization = local_utilization(steps, schedule_.iteration_seconds,
                                            schedule_.exchange_seconds, overlapped());
  const std::size_t count = fragments_.size();
  for (std::size_t p = 0; p < count; ++p) fragments_[p].sync_step = (p + 1) * steps / count;
}

void LocalStage::load_state(engine::StateReader& in) {
  const std::uint64_t steps = in.read_u64();
  const std::uint64_t in_round = in.read_u64();
  if (steps == 0 || in_round >= steps)
    throw CheckpointError("sync.local: inner steps past the round's end");
  if (steps != schedule_.steps) {
    if (!schedule_.automatic || steps > kMaxLocalSteps || steps < fragments_.size()) {
      throw CheckpointError(
          "sync.local: the checkpoint's rounds are of H = " + std::to_string(steps) +
          " inner steps, this job's of " + std::to_string(schedule_.steps) +
          " (set sync.local.steps = " + std::to_string(steps) + " to resume it)");
    }
    adopt_steps(static_cast<std::size_t>(steps));
  }
  const std::uint64_t fragments = in.read_u64();
  if (fragments != fragments_.size()) {
    throw CheckpointError("sync.local: the checkpoint was written with sync.local.fragments = " +
                          std::to_string(fragments) + ", this job has " +
                          std::to_string(fragments_.size()));
  }
  in.read_floats(start_);
  for (Fragment& f : fragments_) {
    f.outer.load_state(in);
    engine::Checkpointable* residual = f.exchange ? f.exchange->residual() : nullptr;
    if ((in.read_u64() != 0) != (residual != nullptr)) {
      throw CheckpointError("sync.local: the checkpoint's outer exchange " +
                            std::string(residual != nullptr ? "kept no" : "kept an") +
                            " error-feedback residual, this job's " + schedule_.wire +
                            (residual != nullptr ? " needs one" : " none") +
                            " (resume with the sync.compression.method it was written with)");
    }
    if (residual != nullptr) {
      residual->load_state(in);
      if (resplit_copy_) f.exchange->clear_residual();
    }
  }
  resplit_copy_ = false;
  const std::uint64_t overlap = in.read_u64();
  if (overlap != static_cast<std::uint64_t>(options_.overlap)) {
    throw CheckpointError(
        "sync.local: the checkpoint was written with sync.local.overlap = \"" +
        (overlap <= 2 ? overlap_name(static_cast<OverlapKind>(overlap)) : std::string("?")) +
        "\", this job has \"" + overlap_name(options_.overlap) + "\"");
  }
  if (overlapped()) {
    in.read_floats(round_start_);
    for (Fragment& f : fragments_) {
      f.pending = in.read_u64() != 0;
      if (f.pending) in.read_floats(std::span(delta_).subspan(f.begin, f.end - f.begin));
      f.mean_ready = f.pending;
    }
    if (options_.overlap == OverlapKind::kEager) in.read_floats(own_);
  }
  in_round_ = static_cast<std::size_t>(in_round);
}

}  // namespace gradmesh::sync
