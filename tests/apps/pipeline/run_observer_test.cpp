// Tests for apps/pipeline/run_observer.h: the console's lines and the metrics' per-epoch figures
// as observers of a run, fed by hand (no training).

#include "apps/pipeline/run_observer.h"

#include "engine/error.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

using namespace gradmesh::app;

namespace {

std::string contents(std::FILE* file) {
  std::fflush(file);
  std::rewind(file);
  std::string text;
  for (int c = std::fgetc(file); c != EOF; c = std::fgetc(file)) text += static_cast<char>(c);
  return text;
}

EpochEnd epoch_end(std::size_t epoch, bool evaluated) {
  EpochEnd e;
  e.rank = 2;
  e.epoch = epoch;
  e.epochs = 3;
  e.done = epoch * 100;
  e.train_loss = 0.5 / static_cast<double>(epoch);
  if (evaluated) e.evaluation = gradmesh::tasks::Model::Evaluation{0.4, 0.8125};
  e.samples_per_second = 41000.4;
  e.bytes_sent = 12.34e6;
  e.wall_seconds = 3.0 * static_cast<double>(epoch);
  e.train_seconds = 2.5 * static_cast<double>(epoch);
  return e;
}

}  // namespace

TEST_CASE("the console prints the resume, the rejoin and one line per epoch", "[pipeline]") {
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  {
    ConsoleReporter console(file);
    console.on_start(RunStart{2, 250, 100, 300, 3, true, false, "ckpt/node-2/ckpt-250.gmckpt"});
    console.on_start(RunStart{2, 250, 100, 300, 3, false, true, ""});
    console.on_start(RunStart{2, 0, 100, 300, 3, false, false, ""});  // a fresh start: nothing
    console.on_epoch_end(epoch_end(1, true));
    console.on_epoch_end(epoch_end(2, false));
  }
  const std::string text = contents(file);
  std::fclose(file);
  CHECK(text ==
        "[rank 2] resumed from iteration 250 (epoch 3, iteration 50 of it) of "
        "ckpt/node-2/ckpt-250.gmckpt\n"
        "[rank 2] rejoined at iteration 250 (epoch 3, iteration 50 of it) from a live peer's "
        "replica\n"
        "[rank 2] epoch 1/3  iter 100  loss 0.5000  test accuracy 81.25%  41000 samples/s  "
        "12.3 MB sent\n"
        "[rank 2] epoch 2/3  iter 200  loss 0.2500  41000 samples/s  12.3 MB sent\n");
}

TEST_CASE("the metrics recorder keeps each epoch's figures and the last epoch's", "[pipeline]") {
  NodeMetrics metrics;
  MetricsRecorder recorder(metrics);
  recorder.on_epoch_end(epoch_end(1, true));
  recorder.on_epoch_end(epoch_end(2, false));
  CHECK(metrics.epochs == 2);
  CHECK(metrics.train_loss == 0.25);
  CHECK(metrics.test_accuracy == 0.0);  // no evaluation in the last epoch
  CHECK(metrics.test_loss == 0.0);
  CHECK(metrics.epoch_train_loss == std::vector<double>{0.5, 0.25});
  CHECK(metrics.epoch_test_accuracy == std::vector<double>{0.8125, 0.0});
  CHECK(metrics.epoch_wall_seconds == std::vector<double>{3.0, 6.0});
  CHECK(metrics.epoch_train_seconds == std::vector<double>{2.5, 5.0});
  CHECK(metrics.epoch_sync.size() == 2);
}

TEST_CASE("a compressing stage's figures reach the metrics and the console's epoch line",
          "[pipeline]") {
  EpochEnd e = epoch_end(1, true);
  e.sync_figures = {{"compression_error.dense0", 0.25},
                    {"compression_error.dense2", 0.5},
                    {"residual_ratio.dense2", 1.5}};
  NodeMetrics metrics;
  MetricsRecorder(metrics).on_epoch_end(e);
  REQUIRE(metrics.epoch_sync.size() == 1);
  CHECK(metrics.epoch_sync[0].at("residual_ratio.dense2") == 1.5);
  std::FILE* out = std::tmpfile();
  REQUIRE(out != nullptr);
  ConsoleReporter(out).on_epoch_end(e);
  std::rewind(out);
  char line[512] = {};
  REQUIRE(std::fgets(line, sizeof line, out) != nullptr);
  std::fclose(out);
  CHECK_THAT(std::string(line), Catch::EndsWith("compression error 0.500\n"));
}

TEST_CASE("a residual that grows 2x an epoch for 3 epochs is reported once as diverging",
          "[pipeline]") {
  ResidualWatch watch;
  const auto norms = [](double dense0, double dense2) {
    return std::map<std::string, double>{{"residual_norm.dense0", dense0},
                                         {"residual_norm.dense2", dense2},
                                         {"compression_error.dense2", 0.9}};
  };
  // dense0 stays bounded (it grows, then falls back); dense2 doubles and more every epoch.
  CHECK(watch.epoch(norms(0.5, 0.1)).empty());
  CHECK(watch.epoch(norms(0.9, 0.2)).empty());
  CHECK(watch.epoch(norms(0.7, 0.5)).empty());
  const auto warnings = watch.epoch(norms(1.2, 1.0));
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::StartsWith("layer dense2:") &&
                              Catch::Contains("0.1 -> 0.2 -> 0.5 -> 1") &&
                              Catch::Contains("optimizer.lr"));
  CHECK(watch.epoch(norms(1.3, 4.0)).empty());  // once
  // Growth just under 2x in one of the epochs: not reported; a non-finite norm at once.
  ResidualWatch slower;
  for (const double n : {0.1, 0.2, 0.39, 0.8}) CHECK(slower.epoch(norms(0.5, n)).empty());
  CHECK(slower.epoch(norms(std::nan(""), 0.9)).size() == 1);
  // A jump of 100x or more in one epoch at once (random-k at 1% on the demo MLP: 1051 -> 2.7e8);
  // 99x is not.
  ResidualWatch jump;
  CHECK(jump.epoch(norms(1051.0, 1.0)).empty());
  CHECK(jump.epoch(norms(1051.0 * 99, 1.0)).empty());
  const auto jumped = jump.epoch(norms(2.7e8, 1.0));
  REQUIRE(jumped.size() == 1);
  CHECK_THAT(jumped[0], Catch::StartsWith("layer dense0:") && Catch::Contains("2.7e+08"));
}

TEST_CASE("for gradmesh-launch the console writes each epoch's end as a record", "[pipeline]") {
  EpochEnd e = epoch_end(2, true);
  e.sync_figures = {{"compression_error.dense2", 0.5}};
  std::FILE* out = std::tmpfile();
  REQUIRE(out != nullptr);
  ConsoleReporter(out, gradmesh::app::ProgressStyle::kRecords).on_epoch_end(e);
  std::rewind(out);
  char line[512] = {};
  REQUIRE(std::fgets(line, sizeof line, out) != nullptr);
  std::fclose(out);
  const std::string text(line);
  INFO(text);
  REQUIRE_THAT(text, Catch::StartsWith("@gradmesh epoch {"));
  const auto json = nlohmann::json::parse(text.substr(text.find('{')));
  CHECK(json.at("rank") == e.rank);
  CHECK(json.at("epoch") == 2);
  CHECK(json.at("loss").get<double>() == Approx(e.train_loss).epsilon(1e-6));
  CHECK(json.at("accuracy").get<double>() == Approx(e.evaluation->accuracy).epsilon(1e-6));
  CHECK(json.at("compression_error").get<double>() == 0.5);
  CHECK(json.at("bytes_sent").get<double>() == Approx(e.bytes_sent));
}

TEST_CASE("a user's metrics reach the metrics file, the epoch line and the launcher's record",
          "[pipeline]") {
  EpochEnd e = epoch_end(1, true);
  e.evaluation->metrics = {{"top2_accuracy", 0.9375}, {"f1.macro", 0.5}};
  NodeMetrics metrics;
  MetricsRecorder recorder(metrics);
  recorder.on_epoch_end(e);
  recorder.on_epoch_end(epoch_end(2, true));  // an evaluation without metrics
  CHECK(metrics.test_metrics.empty());
  REQUIRE(metrics.epoch_test_metrics.size() == 2);
  CHECK(metrics.epoch_test_metrics[0] ==
        std::map<std::string, double>{{"f1.macro", 0.5}, {"top2_accuracy", 0.9375}});
  CHECK(metrics.epoch_test_metrics[1].empty());

  std::FILE* out = std::tmpfile();
  REQUIRE(out != nullptr);
  ConsoleReporter(out).on_epoch_end(e);
  ConsoleReporter(out, gradmesh::app::ProgressStyle::kRecords).on_epoch_end(e);
  const std::string text = contents(out);
  std::fclose(out);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("test accuracy 81.25%  top2_accuracy 0.9375  f1.macro 0.5  "));
  const std::string record = text.substr(text.find("@gradmesh epoch "));
  const auto json = nlohmann::json::parse(record.substr(record.find('{')));
  CHECK(json.at("metrics").at("top2_accuracy").get<double>() == 0.9375);
  CHECK(json.at("metrics").at("f1.macro").get<double>() == 0.5);

  // JSON has no NaN: a metric that is not finite travels as null.
  e.evaluation->metrics = {{"ratio", std::nan("")}};
  std::FILE* record_file = std::tmpfile();
  REQUIRE(record_file != nullptr);
  ConsoleReporter(record_file, gradmesh::app::ProgressStyle::kRecords).on_epoch_end(e);
  const std::string nan_record = contents(record_file);
  std::fclose(record_file);
  CHECK(nlohmann::json::parse(nan_record.substr(nan_record.find('{')))
            .at("metrics")
            .at("ratio")
            .is_null());
}

TEST_CASE("a metric's name is a key: no spaces, no repeats, not loss or accuracy", "[pipeline]") {
  gradmesh::tasks::Model::Evaluation e{0.1, 0.9};
  e.metrics = {{"top5", 0.99}, {"recall.class-3", 0.5}};
  CHECK_NOTHROW(check_metric_names(e));
  for (const std::string bad : {"top 5", "", "loss", "accuracy", "top5",
                                "r\xc3\xa9"
                                "call"}) {
    e.metrics = {{"top5", 0.99}, {bad, 0.5}};
    INFO(bad);
    CHECK_THROWS_AS(check_metric_names(e), gradmesh::ContractError);
  }
  e.metrics = {{"loss", 0.5}};
  CHECK_THROWS_WITH(check_metric_names(e), Catch::Contains("Evaluation's own fields"));
  e.metrics = {{"top5", 0.5}, {"top5", 0.6}};
  CHECK_THROWS_WITH(check_metric_names(e), Catch::Contains("'top5' twice"));
}
