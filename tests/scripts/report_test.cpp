// scripts/report on a finished run: a short 2-node job (gradmesh-launch, --trace), then the report;
// its PNGs are checked for size and dimensions (the PNG header), its summary for each node.

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/process.h"
#include "tests/support/small_job.h"

namespace fs = std::filesystem;
using gradmesh::testing::read_file;
using gradmesh::testing::run_to_end;

namespace {

/// 2 epochs of 10 iterations per node (train_limit 640 / (2 nodes x batch 32)), 2 evaluations.
const std::string kConfig = gradmesh::testing::small_job_toml(
    "report-test", {"job.epochs = 2", "data.train_limit = 640", "data.test_limit = 500"});

/// gnuplot on PATH, or "" (the report needs it; CI installs it through scripts/setup.sh).
std::string find_gnuplot() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path == nullptr ? "" : path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const fs::path candidate = fs::path(dir) / "gnuplot";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

int report(const fs::path& dir, const fs::path& log) {
  return run_to_end({GRADMESH_SOURCE_DIR "/scripts/report", dir.string()}, log,
                    std::chrono::seconds(60));
}

/// Width and height from a PNG's IHDR chunk; {0, 0} if the file is not a PNG.
std::pair<std::uint32_t, std::uint32_t> png_size(const fs::path& path) {
  const std::string bytes = read_file(path);
  if (bytes.size() < 24 || bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0 ||
      bytes.compare(12, 4, "IHDR") != 0) {
    return {0, 0};
  }
  const auto be32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<unsigned char>(bytes[at + i]);
    return v;
  };
  return {be32(16), be32(20)};
}

/// Whether a line of `text` matches `pattern` (ECMAScript).
bool has_line(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_search(line, re)) return true;
  }
  return false;
}

void check_png(const fs::path& path, std::uint32_t width, std::uint32_t height) {
  INFO(path.string());
  REQUIRE(fs::exists(path));
  CHECK(fs::file_size(path) > 8000);  // plots with axes, lines and text, not an empty canvas
  CHECK(fs::file_size(path) < 2'000'000);
  CHECK(png_size(path) == std::pair<std::uint32_t, std::uint32_t>{width, height});
}

}  // namespace

TEST_CASE("the report on a 2-node run writes its PNGs and a summary per node", "[report][e2e]") {
  if (find_gnuplot().empty()) {
    FAIL(
        "gnuplot not found on PATH: scripts/report needs it; bash scripts/setup.sh installs "
        "Debian's gnuplot-nox");
  }
  const fs::path dir = gradmesh::testing::fresh_directory("report");
  std::ofstream(dir / "job.toml") << kConfig;
  const fs::path run_dir = dir / "run";
  const int launched =
      run_to_end({GRADMESH_LAUNCH_BINARY, "-n", "2", "--config", (dir / "job.toml").string(),
                  "--metrics-out", run_dir.string(), "--", "--trace"},
                 dir / "launch.txt", std::chrono::seconds(120));
  INFO(read_file(dir / "launch.txt"));
  REQUIRE(launched == 0);
  REQUIRE(fs::exists(run_dir / "trace-1.json"));
  for (const int rank : {0, 1}) {  // pid = rank; on every thread the slices nest
    INFO("trace-" << rank << ".json");
    const auto trace =
        nlohmann::json::parse(read_file(run_dir / ("trace-" + std::to_string(rank) + ".json")));
    CHECK(trace.at("otherData").at("rank") == rank);
    std::map<int, std::vector<std::pair<double, double>>> tracks;  // tid -> slices
    for (const auto& e : trace.at("traceEvents")) {
      CHECK(e.at("pid") == rank);
      if (e.at("ph") == "X")
        tracks[e.at("tid")].emplace_back(e.at("ts").get<double>(),
                                         e.at("ts").get<double>() + e.at("dur").get<double>());
    }
    REQUIRE(tracks.size() >= 2);  // compute and network
    for (auto& [tid, slices] : tracks) {
      std::sort(slices.begin(), slices.end());
      for (std::size_t i = 1; i < slices.size(); ++i) {
        INFO("tid " << tid << " slice " << i);
        CHECK(slices[i].first >= slices[i - 1].second);  // one lane: none overlap
      }
    }
  }
  {  // scripts/merge-traces: one file, both ranks' processes
    REQUIRE(run_to_end({GRADMESH_SOURCE_DIR "/scripts/merge-traces", run_dir.string()},
                       dir / "merge.txt", std::chrono::seconds(60)) == 0);
    INFO(read_file(dir / "merge.txt"));
    const auto merged = nlohmann::json::parse(read_file(run_dir / "trace.json"));
    std::set<int> pids;
    for (const auto& e : merged.at("traceEvents")) pids.insert(e.at("pid").get<int>());
    CHECK(pids == std::set<int>{0, 1});
    CHECK_THAT(read_file(dir / "merge.txt"), Catch::Contains("2 node(s)"));
  }
  // The metrics the progress plot reads: one time per evaluation (2 epochs), rising, the
  // training-only seconds within the wall seconds.
  const auto metrics = nlohmann::json::parse(read_file(run_dir / "node-0.json"));
  const auto wall = metrics.at("epoch_wall_seconds").get<std::vector<double>>();
  const auto train = metrics.at("epoch_train_seconds").get<std::vector<double>>();
  REQUIRE(wall.size() == 2);
  REQUIRE(train.size() == 2);
  CHECK(0 < wall[0]);
  CHECK(wall[0] < wall[1]);
  CHECK(wall[1] <= metrics.at("wall_seconds").get<double>());
  CHECK(train[0] <= wall[0]);
  CHECK(train[1] <= wall[1]);

  const int code = report(run_dir, dir / "report.txt");
  const std::string out = read_file(dir / "report.txt");
  INFO(out);
  REQUIRE(code == 0);
  CHECK_THAT(out, Catch::Contains("job 'report-test', 2 node(s)"));
  CHECK(has_line(out, "^ +0 +ps +20 "));  // rank, strategy, iterations
  CHECK(has_line(out, "^ +1 +ps +20 "));
  CHECK_THAT(out, Catch::Contains("compute ms/it"));
  check_png(run_dir / "progress.png", 1000, 700);
  check_png(run_dir / "bytes_by_lane.png", 1000, 500);
  check_png(run_dir / "compute_vs_comm.png", 1000, 520);

  {  // without traces the compute plot is skipped, saying so
    const fs::path bare = dir / "bare";
    fs::create_directories(bare);
    for (const char* name : {"node-0.json", "node-1.json"}) fs::copy(run_dir / name, bare / name);
    CHECK(report(bare, dir / "bare.txt") == 0);
    const std::string bare_out = read_file(dir / "bare.txt");
    INFO(bare_out);
    CHECK_THAT(bare_out, Catch::Contains("no traces") && Catch::Contains("--trace"));
    check_png(bare / "progress.png", 1000, 700);
    CHECK_FALSE(fs::exists(bare / "compute_vs_comm.png"));
    CHECK_THAT(bare_out, Catch::Contains("no compressed layers"));
    CHECK_FALSE(fs::exists(bare / "compression.png"));
  }
  {  // a compressed run's epoch_sync (as a top-k or PowerSGD layer records it): its plot and the
     // last epoch's figures in the summary
    const fs::path compressed = dir / "compressed";
    fs::create_directories(compressed);
    for (const char* name : {"node-0.json", "node-1.json"}) {
      auto m = nlohmann::json::parse(read_file(run_dir / name));
      m["epoch_sync"] = nlohmann::json::array({{{"compression_error.dense0", 0.92},
                                                {"residual_norm.dense0", 0.01},
                                                {"residual_ratio.dense0", 4.5},
                                                {"compression_error.dense2", 0.5},
                                                {"residual_norm.dense2", 0.002},
                                                {"residual_ratio.dense2", 1.25}},
                                               {{"compression_error.dense0", 0.9},
                                                {"residual_norm.dense0", 0.012},
                                                {"residual_ratio.dense0", 6.0},
                                                {"compression_error.dense2", 0.45},
                                                {"residual_norm.dense2", 0.002},
                                                {"residual_ratio.dense2", 1.5}}});
      std::ofstream(compressed / name) << m.dump();
    }
    CHECK(report(compressed, dir / "compressed.txt") == 0);
    const std::string compressed_out = read_file(dir / "compressed.txt");
    INFO(compressed_out);
    CHECK(has_line(compressed_out,
                   "^rank 0 compression error, last epoch: dense0 0.900 "
                   "\\(residual 6.0x g\\), dense2 0.450"));
    check_png(compressed / "compression.png", 1000, 700);
  }
  {  // a user's evaluation's metrics (epoch_test_metrics): a table by epoch, once for ranks whose
     // figures agree
    const fs::path user = dir / "user-metrics";
    fs::create_directories(user);
    for (const char* name : {"node-0.json", "node-1.json"}) {
      auto m = nlohmann::json::parse(read_file(run_dir / name));
      m["epoch_test_metrics"] = nlohmann::json::array(
          {{{"top2_accuracy", 0.875}, {"f1", 0.5}}, {{"top2_accuracy", 0.9375}, {"f1", 0.625}}});
      std::ofstream(user / name) << m.dump();
    }
    CHECK(report(user, dir / "user.txt") == 0);
    const std::string user_out = read_file(dir / "user.txt");
    INFO(user_out);
    CHECK(has_line(user_out, "^ranks 0-1 test metrics by epoch:$"));
    CHECK(has_line(user_out, "^  epoch +f1 +top2_accuracy$"));
    CHECK(has_line(user_out, "^      1 +0.5 +0.875$"));
    CHECK(has_line(user_out, "^      2 +0.625 +0.9375$"));
    CHECK_THAT(read_file(dir / "bare.txt"), !Catch::Contains("test metrics by epoch"));
  }
  {  // a folder without metrics is an error naming it
    const fs::path empty = dir / "empty";
    fs::create_directories(empty);
    CHECK(report(empty, dir / "empty.txt") == 2);
    CHECK_THAT(read_file(dir / "empty.txt"), Catch::Contains("no metrics in " + empty.string()) &&
                                                 Catch::Contains("node-<rank>.json"));
  }
}
