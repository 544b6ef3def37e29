#include "apps/pipeline/run_observer.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <string_view>

#include <spdlog/fmt/fmt.h>

#include "engine/error.h"

namespace gradmesh::app {

void ConsoleReporter::on_start(const RunStart& s) {
  const auto epoch = static_cast<unsigned long long>(s.start / s.per_epoch + 1);
  const auto in_epoch = static_cast<unsigned long long>(s.start % s.per_epoch);
  const auto start = static_cast<unsigned long long>(s.start);
  if (s.rejoined) {
    std::fprintf(out_,
                 "[rank %zu] rejoined at iteration %llu (epoch %llu, iteration %llu of it) from a "
                 "live peer's replica\n",
                 s.rank, start, epoch, in_epoch);
  }
  if (s.resumed) {
    std::fprintf(
        out_, "[rank %zu] resumed from iteration %llu (epoch %llu, iteration %llu of it) of %s\n",
        s.rank, start, epoch, in_epoch, s.resume_source.c_str());
  }
  std::fflush(out_);
}

void ConsoleReporter::on_epoch_end(const EpochEnd& e) {
  progress_.finish();
  std::string accuracy =
      e.evaluation ? fmt::format("  test accuracy {:.2f}%", 100.0 * e.evaluation->accuracy) : "";
  std::string metrics_json;  // a user's metrics, {"name":value,...}, for the launcher's record
  if (e.evaluation) {
    for (const auto& [name, value] : e.evaluation->metrics) {
      accuracy += fmt::format("  {} {:.4g}", name, value);
      // JSON has no NaN or infinity: such a value travels as null.
      metrics_json += fmt::format("{}\"{}\":{}", metrics_json.empty() ? "" : ",", name,
                                  std::isfinite(value) ? fmt::format("{:.6g}", value) : "null");
    }
  }
  // A compressing stage: its largest per-layer compression error of the epoch.
  double worst = -1;
  for (const auto& [key, value] : e.sync_figures) {
    if (key.starts_with("compression_error.")) worst = std::max(worst, value);
  }
  const std::string compression =
      worst >= 0 ? fmt::format("  compression error {:.3f}", worst) : std::string();
  if (progress_.style() == ProgressStyle::kRecords) {
    const std::string accuracy_json =
        e.evaluation ? fmt::format("{:.6f}", e.evaluation->accuracy) : std::string("null");
    const std::string compression_json = worst >= 0 ? fmt::format("{:.6f}", worst) : "null";
    std::fprintf(out_,
                 "%sepoch {\"rank\":%zu,\"epoch\":%zu,\"epochs\":%zu,\"done\":%llu,\"loss\":%.6f,"
                 "\"accuracy\":%s,\"samples_per_second\":%.3f,\"bytes_sent\":%.0f,"
                 "\"compression_error\":%s,\"metrics\":{%s}}\n",
                 std::string(kRecordPrefix).c_str(), e.rank, e.epoch, e.epochs,
                 static_cast<unsigned long long>(e.done), e.train_loss, accuracy_json.c_str(),
                 e.samples_per_second, e.bytes_sent, compression_json.c_str(),
                 metrics_json.c_str());
  } else {
    std::fprintf(
        out_, "[rank %zu] epoch %zu/%zu  iter %llu  loss %.4f%s  %.0f samples/s  %.1f MB sent%s\n",
        e.rank, e.epoch, e.epochs, static_cast<unsigned long long>(e.done), e.train_loss,
        accuracy.c_str(), e.samples_per_second, e.bytes_sent / 1e6, compression.c_str());
  }
  for (const std::string& warning : residuals_.epoch(e.sync_figures)) {
    std::fprintf(out_, "[rank %zu] warning: %s\n", e.rank, warning.c_str());
  }
  std::fflush(out_);
}

std::vector<std::string> ResidualWatch::epoch(const std::map<std::string, double>& figures) {
  static constexpr std::string_view kPrefix = "residual_norm.";
  std::vector<std::string> warnings;
  for (const auto& [key, norm] : figures) {
    if (!key.starts_with(kPrefix)) continue;
    const std::string name = key.substr(kPrefix.size());
    Layer& layer = layers_[name];
    layer.norms.push_back(norm);
    if (layer.norms.size() > kEpochs + 1) layer.norms.erase(layer.norms.begin());
    if (layer.reported) continue;
    const std::size_t kept = layer.norms.size();
    const double before = kept >= 2 ? layer.norms[kept - 2] : 0.0;
    bool diverging = !std::isfinite(norm) || (before > 0 && norm >= kJump * before);
    if (!diverging && kept == kEpochs + 1) {
      diverging = true;
      for (std::size_t i = 1; i < layer.norms.size(); ++i) {
        diverging = diverging && layer.norms[i] >= kGrowth * layer.norms[i - 1];
      }
    }
    if (!diverging) continue;
    layer.reported = true;
    std::string trail;
    for (const double each : layer.norms)
      trail += (trail.empty() ? "" : " -> ") + fmt::format("{:.3g}", each);
    warnings.push_back(fmt::format(
        "layer {}: error-feedback residual norm {} over the last {} epoch(s): error feedback is "
        "diverging; lower optimizer.lr, or keep more (sync.compression.ratio, .rank) "
        "(docs/compression.md)",
        name, trail, layer.norms.size()));
  }
  return warnings;
}

void check_metric_names(const tasks::Model::Evaluation& e) {
  std::set<std::string_view> seen;
  // ASCII by value, not std::isalnum: the accepted names must not depend on the C locale.
  const auto allowed = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  };
  for (const auto& [name, value] : e.metrics) {
    if (name.empty() || !std::all_of(name.begin(), name.end(), allowed)) {
      throw ContractError("the evaluation returned a metric named '" + name +
                          "': a metric's name is letters, digits, '_', '.' and '-' (it is a key "
                          "of the metrics file and a column of scripts/report)");
    }
    if (name == "loss" || name == "accuracy") {
      throw ContractError("the evaluation returned a metric named '" + name +
                          "': loss and accuracy are Evaluation's own fields (set them there); "
                          "give the metric another name");
    }
    if (!seen.insert(name).second) {
      throw ContractError("the evaluation returned the metric '" + name +
                          "' twice: give each metric one name of its own");
    }
  }
}

void MetricsRecorder::on_epoch_end(const EpochEnd& e) {
  metrics_.epochs = e.epoch;
  metrics_.train_loss = e.train_loss;
  metrics_.test_accuracy = e.evaluation ? e.evaluation->accuracy : 0.0;
  metrics_.test_loss = e.evaluation ? e.evaluation->loss : 0.0;
  metrics_.test_metrics.clear();
  if (e.evaluation)
    metrics_.test_metrics.insert(e.evaluation->metrics.begin(), e.evaluation->metrics.end());
  metrics_.epoch_test_metrics.push_back(metrics_.test_metrics);
  metrics_.epoch_train_loss.push_back(e.train_loss);
  metrics_.epoch_test_accuracy.push_back(metrics_.test_accuracy);
  metrics_.epoch_wall_seconds.push_back(e.wall_seconds);
  metrics_.epoch_train_seconds.push_back(e.train_seconds);
  metrics_.epoch_sync.push_back(e.sync_figures);
}

}  // namespace gradmesh::app
