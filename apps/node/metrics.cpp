#include "apps/node/metrics.h"

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/pipeline/start_up.h"
#include "engine/error.h"

namespace gradmesh::app {

namespace {

nlohmann::json plan_json(const std::vector<sync::LayerPlan>& plan) {
  nlohmann::json rows = nlohmann::json::array();
  for (const sync::LayerPlan& row : plan) {
    rows.push_back({{"layer", row.layer},
                    {"name", row.name},
                    {"shape", row.shape},
                    {"parameters", row.parameters},
                    {"scheme", row.scheme},
                    {"chunks", row.chunks},
                    {"ps_floats", row.ps_floats},
                    {"sfb_floats", row.sfb_floats},
                    {"predicted_bytes_sent", row.predicted_bytes_sent},
                    {"predicted_seconds", row.predicted_seconds},
                    {"predicted_compute_seconds", row.predicted_compute_seconds},
                    {"predicted_codec_seconds", row.predicted_codec_seconds},
                    {"predicted_transport_seconds", row.predicted_transport_seconds}});
  }
  return rows;
}

/// Writes `doc` to `dir`/`name`, creating `dir`; `what` names the file in the errors.
void write_json(const std::filesystem::path& dir, const std::string& name,
                const nlohmann::json& doc, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const auto path = dir / name;
  std::ofstream out(path);
  if (!out) throw Error("cannot write " + what + " " + path.string());
  out << doc.dump(2) << '\n';
  if (!out) throw Error("failed writing " + what + " " + path.string());
}

}  // namespace

void write_metrics(const std::filesystem::path& dir, const NodeMetrics& m, std::string_view tag) {
  const nlohmann::json doc = {
      {"rank", m.rank},
      {"nodes", m.nodes},
      {"strategy", m.strategy},
      {"job", m.job},
      {"epochs", m.epochs},
      {"iterations", m.iterations},
      {"samples", m.samples},
      {"resumed_from_iteration", m.resumed_from_iteration
                                     ? nlohmann::json(*m.resumed_from_iteration)
                                     : nlohmann::json(nullptr)},
      {"rollbacks", m.rollbacks},
      {"view", m.view},
      {"view_id", m.view_id},
      {"rejoins_admitted", m.rejoins_admitted},
      {"rejoined", m.rejoined},
      {"checkpoints_written", m.checkpoints_written},
      {"checkpoint_bytes", m.checkpoint_bytes},
      {"checkpoint_seconds", m.checkpoint_seconds},
      {"checkpoint_write_seconds", m.checkpoint_write_seconds},
      {"wall_seconds", m.wall_seconds},
      {"train_seconds", m.train_seconds},
      {"finish_seconds", m.finish_seconds},
      {"iteration_seconds",
       m.iterations > 0 ? m.train_seconds / static_cast<double>(m.iterations) : 0.0},
      {"first_iteration_seconds", m.first_iteration_seconds},
      // The mean over the iterations after the first (the steady state the planner predicts).
      {"steady_iteration_seconds",
       m.iterations > 1
           ? (m.train_seconds - m.first_iteration_seconds) / static_cast<double>(m.iterations - 1)
           : (m.iterations == 1 ? m.train_seconds : 0.0)},
      {"samples_per_second", m.samples_per_second},
      {"train_loss", m.train_loss},
      {"test_accuracy", m.test_accuracy},
      {"test_loss", m.test_loss},
      {"final_test_accuracy", m.final_test_accuracy},
      {"final_test_loss", m.final_test_loss},
      {"test_metrics", m.test_metrics},
      {"final_test_metrics", m.final_test_metrics},
      {"bytes_sent", m.bytes_sent},
      {"bytes_received", m.bytes_received},
      {"bytes_sent_per_iteration", m.bytes_sent_per_iteration},
      {"bytes_sent_by_stage", m.bytes_sent_by_lane},
      {"bytes_received_by_stage", m.bytes_received_by_lane},
      {"malformed_frames", m.malformed_frames},
      {"rejected_connections", m.rejected_connections},
      {"unverified_frames", m.unverified_frames},
      {"rejected_messages", m.rejected_messages},
      {"longest_silence_seconds_by_peer", m.longest_silence_seconds_by_peer},
      {"parameters", m.parameters},
      {"batch_size", m.batch_size},
      {"epoch_test_accuracy", m.epoch_test_accuracy},
      {"epoch_train_loss", m.epoch_train_loss},
      {"epoch_test_metrics", m.epoch_test_metrics},
      {"epoch_wall_seconds", m.epoch_wall_seconds},
      {"epoch_train_seconds", m.epoch_train_seconds},
      {"epoch_sync", m.epoch_sync},
      {"plan", plan_json(m.plan)},
      {"sync", m.sync},
  };
  write_json(dir, "node-" + std::to_string(m.rank) + std::string(tag) + ".json", doc,
             "metrics file");
}

void write_failed_run(const std::filesystem::path& dir, const FailedRun& f, std::string_view tag) {
  const nlohmann::json doc = {
      {"rank", f.rank},
      {"nodes", f.nodes},
      {"job", f.job},
      {"strategy", f.strategy},
      {"error", f.error},
      {"iteration", f.iteration},
      {"view", f.view},
      {"view_id", f.view_id},
      {"rollbacks", f.rollbacks},
      {"malformed_frames", f.counters.malformed_frames},
      {"rejected_connections", f.counters.rejected_connections},
      {"unverified_frames", f.counters.unverified_frames},
      {"rejected_messages", f.counters.rejected_messages},
  };
  write_json(dir, "failed-node-" + std::to_string(f.rank) + std::string(tag) + ".json", doc,
             "the failed node's file");
}

std::string format_plan(const std::vector<sync::LayerPlan>& plan) {
  std::ostringstream out;
  const auto floats = [](double f) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(f >= 1e6 ? 2 : 1);
    if (f >= 1e6) {
      s << f / 1e6 << "M";
    } else if (f >= 1e3) {
      s << f / 1e3 << "k";
    } else {
      s << std::setprecision(0) << f;
    }
    return s.str();
  };
  // The name, shape and scheme columns fit their longest entries ("global_avg_pool70",
  // "32x14x14->64x14x14", "allreduce fp16 b12"), at least the CNN config's widths.
  int name_width = 13, shape_width = 20, scheme_width = 14;
  for (const sync::LayerPlan& row : plan) {
    name_width = std::max(name_width, static_cast<int>(row.name.size()) + 1);
    shape_width = std::max(shape_width, static_cast<int>(row.shape.size()) + 1);
    scheme_width = std::max(scheme_width, static_cast<int>(row.scheme.size()) + 1);
  }
  out << std::left << std::setw(7) << "layer" << std::setw(name_width) << "name"
      << std::setw(shape_width) << "shape" << std::right << std::setw(11) << "parameters"
      << "  " << std::left << std::setw(scheme_width) << "scheme" << std::right << std::setw(12)
      << "PS floats" << std::setw(12) << "SFB floats" << std::setw(8) << "chunks" << std::setw(17)
      << "bytes sent/iter" << std::setw(10) << "comm ms" << std::setw(12) << "compute ms"
      << std::setw(10) << "codec ms" << '\n';
  double total = 0;
  std::size_t params = 0;
  for (const sync::LayerPlan& row : plan) {
    out << std::left << std::setw(7) << row.layer << std::setw(name_width) << row.name
        << std::setw(shape_width) << row.shape << std::right << std::setw(11) << row.parameters
        << "  " << std::left << std::setw(scheme_width) << row.scheme << std::right << std::setw(12)
        << (row.parameters ? floats(row.ps_floats) : "-") << std::setw(12)
        << (row.sfb_floats > 0 ? floats(row.sfb_floats) : "-") << std::setw(8) << row.chunks
        << std::setw(17) << std::fixed << std::setprecision(0) << row.predicted_bytes_sent
        << std::setw(10) << std::setprecision(3)
        << (row.predicted_seconds - row.predicted_compute_seconds) * 1e3 << std::setw(12)
        << row.predicted_compute_seconds * 1e3 << std::setw(10) << row.predicted_codec_seconds * 1e3
        << '\n';
    total += row.predicted_bytes_sent;
    params += row.parameters;
  }
  out << std::left << std::setw(7 + name_width + shape_width) << "total" << std::right
      << std::setw(11) << params << std::setw(51 + scheme_width) << std::fixed
      << std::setprecision(0) << total << '\n';
  out << "(PS / SFB floats: per node per iteration by Poseidon ATC'17 Table 1 with P1 = P2 = "
         "nodes;\n"
         " bytes sent/iter: this node's payload + frame headers under the chosen schemes;\n"
         " comm ms: the planner's time of the layer's communication, a bucket's on its first "
         "layer;\n"
         " compute ms: its work after it: the step, SFB's rebuild GEMM, PowerSGD's GEMMs, "
         "encodes and decodes;\n"
         " codec ms: of that, the compressor's encodes and decodes (PowerSGD: its GEMMs))\n";
  return out.str();
}

std::string format_summary(const std::map<std::string, double>& summary, bool measured) {
  std::ostringstream out;
  const auto has = [&](const char* key) { return summary.count(key) > 0; };
  out << std::fixed;
  if (has("bandwidth")) {
    out << "inputs: alpha " << std::setprecision(1) << summary.at("alpha") * 1e6 << " us, B "
        << std::setprecision(2) << summary.at("bandwidth") / 1e6 << " MB/s";
    if (has("message_overhead")) {
      out << ", o " << std::setprecision(1) << summary.at("message_overhead") * 1e6 << " us";
    }
    if (has("gemm_flops")) {
      out << ", GEMM " << std::setprecision(1) << summary.at("gemm_flops") / 1e9 << " GFLOP/s";
    }
    if (has("step_seconds_per_float")) {
      out << ", step " << std::setprecision(2) << summary.at("step_seconds_per_float") * 1e9
          << " ns/float";
    }
    out << (measured ? " (layer times, GEMM, step and compressor measured here; planner.* and "
                       "--bandwidth override)"
                     : " (planner.* or assumed)")
        << '\n';
  }
  if (has("predicted_iteration_seconds")) {
    out << "predicted: " << std::setprecision(0) << summary.at("predicted_bytes_sent")
        << " bytes sent per iteration, " << std::setprecision(3)
        << summary.at("predicted_iteration_seconds") * 1e3 << " ms per iteration, "
        << std::setprecision(0) << summary.at("buckets") << " all-reduce bucket(s), KV chunk "
        << summary.at("kv_chunk_floats") << " floats\n";
    if (const auto text = app::compression_choice_text(summary)) out << *text << '\n';
    out << "budgets (bytes per iteration):";
    for (const auto& [key, value] : summary) {
      if (key.rfind("budget_", 0) == 0) out << ' ' << key.substr(7) << ' ' << value;
    }
    out << '\n';
  } else if (!summary.empty()) {
    out << "strategy figures:";
    for (const auto& [key, value] : summary)
      out << ' ' << key << ' ' << std::setprecision(4) << value;
    out << '\n';
  }
  return out.str();
}

}  // namespace gradmesh::app
