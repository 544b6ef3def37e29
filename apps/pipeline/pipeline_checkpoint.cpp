// Pipeline's checkpoints and --resume (README "Checkpoints and resume"; Poseidon arXiv'15
// sec. 4.4): the agreement on the checkpoint to resume from, the pipeline's and the user's
// sections, and the writes in the background.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "apps/pipeline/pipeline.h"
#include "apps/pipeline/pipeline_state.h"
#include "engine/checkpoint.h"
#include "engine/error.h"
#include "sync/resume/resume_agreement.h"

namespace gradmesh::app {

namespace {

using Clock = std::chrono::steady_clock;

/// The keys whose values differ between two training_text()s ("key = value" lines), for the
/// error of a --resume under another config.
std::string config_difference(const std::string& saved, const std::string& current) {
  const auto parse = [](const std::string& text) {
    std::map<std::string, std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      const std::size_t eq = line.find(" = ");
      if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 3);
    }
    return out;
  };
  const auto a = parse(saved), b = parse(current);
  std::string out;
  const auto add = [&out](const std::string& key, const std::string& then, const std::string& now) {
    out += (out.empty() ? "" : "; ") + key + " = " + then + " in the checkpoint, " + now + " now";
  };
  for (const auto& [key, value] : a) {
    const auto it = b.find(key);
    if (it == b.end()) add(key, value, "no such key");
    else if (it->second != value) add(key, value, it->second);
  }
  for (const auto& [key, value] : b) {
    if (!a.contains(key)) add(key, "no such key", value);
  }
  return out.empty() ? "(the same keys and values: written by another gradmesh version?)" : out;
}

}  // namespace

void Pipeline::agree_on_checkpoint() {
  State& s = *state_;
  const std::filesystem::path& dir = *s.options.resume;
  const engine::CheckpointStore store(dir, s.rank);
  std::vector<std::string> problems;
  const std::vector<std::uint64_t> valid = store.valid_iterations(problems);
  for (const std::string& p : problems) {
    spdlog::warn("--resume: skipping a checkpoint that does not verify: {}", p);
  }
  const auto lists = s.agreement->exchange(valid);
  std::uint64_t iteration = 0;
  try {
    iteration = sync::ResumeAgreement::newest_common(lists);
  } catch (const CheckpointError& e) {
    throw CheckpointError("--resume " + dir.string() + ": " + e.what() + " (this node looked in " +
                          store.node_dir().string() + ")");
  }
  if (iteration != valid.front()) {
    spdlog::warn("--resume: iteration {} is the newest checkpoint every node has; this node's "
                 "newest valid one is {}",
                 iteration, valid.front());
  }
  const std::string path = store.path(iteration).string();
  engine::Checkpoint checkpoint = store.load(iteration);
  const engine::CheckpointHeader& h = checkpoint.header;
  if (h.nodes != s.nodes()) {
    throw CheckpointError(path + ": written by a job of " + std::to_string(h.nodes) +
                          " nodes, this one has " + std::to_string(s.nodes()) +
                          ": resuming on another node count is not supported yet (README "
                          "\"Checkpoints and resume\")");
  }
  if (h.rank != s.rank) {
    throw CheckpointError(path + ": written by rank " + std::to_string(h.rank) +
                          ", read by rank " + std::to_string(s.rank));
  }
  if (h.config_fingerprint != s.config.training_fingerprint() ||
      h.config_text != s.config.training_text()) {
    throw ConfigError(path + ": written under another config: " +
                      config_difference(h.config_text, s.config.training_text()) +
                      " (only job.name, job.epochs, job.max_iterations, checkpoint.*, net.*, "
                      "security.*, compute.threads and data.test_limit may change on --resume)");
  }
  spdlog::info("--resume: every node continues from iteration {} ({})", iteration, path);
  s.resume_source = path;
  s.resume_from = std::move(checkpoint);
}

void Pipeline::add_checkpoint_state(std::string name, engine::Checkpointable& state) {
  State& s = *state_;
  GRADMESH_CHECK(!s.ran, "Pipeline::add_checkpoint_state after run()");
  for (const char* own : {"model", "optimizer", "cursor", "sync"}) {
    GRADMESH_CHECK(name != own, "Pipeline::add_checkpoint_state: '" + name +
                                    "' is one of the pipeline's own sections");
  }
  s.own_states.emplace_back(std::move(name), &state);
}

void Pipeline::write_checkpoint(std::uint64_t iteration, NodeMetrics& metrics) {
  State& s = *state_;
  const auto begin = Clock::now();
  finish_checkpoint_write(metrics);  // the previous file is on disk before its buffer is reused
  s.checkpoint_header.iteration = iteration;
  s.checkpoints.save(s.checkpoint_header, s.checkpoint_file);
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  ++metrics.checkpoints_written;
  metrics.checkpoint_bytes = s.checkpoint_file.size();
  metrics.checkpoint_seconds += seconds;
  spdlog::info("checkpoint of iteration {}: {:.2f} MB of state saved in {:.1f} ms (with any wait for "
               "the previous write); writing it in the background",
               iteration, static_cast<double>(s.checkpoint_file.size()) / 1e6, seconds * 1e3);
  // The write (temporary file, fsync, rename) runs beside the next iterations; the state is
  // already a copy, so training goes on at once.
  s.checkpoint_writing = iteration;
  s.checkpoint_write = std::async(std::launch::async, [&s, iteration] {
    const auto start = Clock::now();
    s.store->save(iteration, s.checkpoint_file);
    return std::chrono::duration<double>(Clock::now() - start).count();
  });
}

void Pipeline::finish_checkpoint_write(NodeMetrics& metrics) {
  State& s = *state_;
  if (!s.checkpoint_write.valid()) return;
  const double seconds = s.checkpoint_write.get();  // rethrows the write's CheckpointError
  metrics.checkpoint_write_seconds += seconds;
  spdlog::info("checkpoint of iteration {} written in {:.1f} ms ({})", s.checkpoint_writing,
               seconds * 1e3, s.store->path(s.checkpoint_writing).string());
}

}  // namespace gradmesh::app
