// End-to-end tests of the non-finite guard (issue 59; job.on_nonfinite): a diverging job stops on
// every node at the first iteration whose loss or update is NaN or Inf, naming the layer, instead
// of training on to exit 0; "rollback" goes back to the newest checkpoint once. Real
// gradmesh-node processes on 127.0.0.1.

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/apps/node/bsp_job.h"
#include "tests/apps/node/cluster.h"

using gradmesh::testing::Cluster;
using gradmesh::testing::config_text;
using gradmesh::testing::Job;

namespace {

/// A learning rate far past stable for the demo MLP: its updates overflow within a few
/// iterations, deterministically (a BSP job's sums are the same bits on every run).
constexpr double kDivergingLr = 1e8;

/// The iteration a node's log names in its non-finite error ("non-finite values at iteration
/// K"), or 0 when it names none.
std::uint64_t non_finite_iteration(const std::string& log) {
  static const std::regex pattern("non-finite values at iteration ([0-9]+)");
  std::smatch m;
  return std::regex_search(log, m, pattern) ? std::stoull(m[1].str()) : 0;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("a diverging BSP job stops on every node at the first non-finite iteration",
          "[e2e][nonfinite]") {
  for (const std::string strategy : {"ps", "allreduce"}) {
    INFO("sync.strategy = " << strategy);
    Job job;
    job.lr = kDivergingLr;
    job.iterations = 30;
    std::uint64_t first = 0;
    {
      Cluster cluster("nonfinite-" + strategy, 2, config_text(job, strategy));
      cluster.start();
      const auto codes = cluster.wait(std::chrono::seconds(120));
      INFO(cluster.all_logs());
      CHECK(codes[0] == 1);
      CHECK(codes[1] == 1);
      first = non_finite_iteration(cluster.log_text(0));
      REQUIRE(first >= 1);
      REQUIRE(first < job.iterations);
      for (std::size_t r = 0; r < 2; ++r) {
        const std::string log = cluster.log_text(r);
        // Each node found it itself, at the same iteration, and says where and what to try.
        CHECK(non_finite_iteration(log) == first);
        CHECK_THAT(log, Catch::Contains("on rank " + std::to_string(r) + " (") &&
                            Catch::Contains(" of layer ") && Catch::Contains(" NaN and ") &&
                            Catch::Contains("Try a lower optimizer.lr"));
        // A node that stopped on an error writes failed-node-<rank>.json, never node-<rank>.json.
        const std::string name = "node-" + std::to_string(r) + ".json";
        CHECK_FALSE(std::filesystem::exists(cluster.dir() / name));
        std::ifstream in(cluster.dir() / ("failed-" + name));
        REQUIRE(in);
        const auto failed = nlohmann::json::parse(in);
        CHECK(failed["rank"] == r);
        CHECK(failed["iteration"] == first);
        CHECK(failed["strategy"] == strategy);
        CHECK_THAT(failed["error"].get<std::string>(),
                   Catch::StartsWith("non-finite values at iteration " + std::to_string(first)));
        for (const char* counter : {"malformed_frames", "rejected_connections", "unverified_frames",
                                    "rejected_messages"}) {
          CHECK(failed[counter] == 0);
        }
      }
    }
    // The iterations before it were finite: the same job without the guard, stopped one
    // iteration earlier, finishes with a finite loss; and, run past it, trains on to exit 0
    // with a NaN loss (what the guard is for).
    for (const bool past : {false, true}) {
      Job unguarded = job;
      unguarded.iterations = past ? first + 3 : first - 1;
      if (unguarded.iterations == 0) continue;
      Cluster cluster("nonfinite-off-" + strategy, 2, config_text(unguarded, strategy));
      cluster.start({"--set", "job.on_nonfinite=off"});
      const auto codes = cluster.wait(std::chrono::seconds(120));
      INFO(cluster.all_logs());
      REQUIRE(codes == std::vector<int>{0, 0});
      const auto loss = cluster.metrics(0)["train_loss"];
      if (past) {
        CHECK((loss.is_null() || !std::isfinite(loss.get<double>())));
      } else {
        REQUIRE(loss.is_number());
        CHECK(std::isfinite(loss.get<double>()));
      }
    }
  }
}

TEST_CASE("job.on_nonfinite = rollback goes back to the newest checkpoint once, then stops",
          "[e2e][nonfinite][checkpoint]") {
  Job job;
  job.lr = kDivergingLr;
  job.iterations = 30;
  Cluster cluster("nonfinite-rollback", 2, config_text(job, "ps"));
  const std::string dir = (cluster.dir() / "ckpt").string();
  cluster.start({"--set", "job.on_nonfinite=rollback", "--set", "checkpoint.dir=" + dir, "--set",
                 "checkpoint.every=1"});
  const auto codes = cluster.wait(std::chrono::seconds(120));
  INFO(cluster.all_logs());
  CHECK(codes == std::vector<int>{1, 1});
  for (std::size_t r = 0; r < 2; ++r) {
    const std::string log = cluster.log_text(r);
    CHECK(count(log, "rolling back to the newest checkpoint") == 1);
    // The same iterations again, from the checkpoint before: the same sum, the same NaN.
    CHECK_THAT(log, Catch::Contains("It recurred after the job rolled back"));
  }
}

TEST_CASE("job.on_nonfinite = rollback without checkpoint.dir is a config error naming the key",
          "[e2e][nonfinite][config]") {
  Cluster cluster("nonfinite-rollback-config", 1, config_text(Job{}, "none"));
  cluster.start({"--set", "job.on_nonfinite=rollback"});
  const auto codes = cluster.wait(std::chrono::seconds(30));
  INFO(cluster.log_text(0));
  CHECK(codes == std::vector<int>{2});
  CHECK_THAT(cluster.log_text(0), Catch::Contains("job.on_nonfinite = \"rollback\" needs "
                                                  "checkpoint.dir and a BSP strategy"));
}
