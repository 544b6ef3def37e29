// End-to-end tests of strategy local's quorum rounds (sync/local/quorum_rounds.h; issue 57, item
// 5): real gradmesh-node processes on 127.0.0.1, a peer SIGKILLed mid-job. Without quorum rounds
// local rolls back to checkpoints (bsp_failure_test.cpp).

#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/apps/node/bsp_job.h"
#include "tests/apps/node/cluster.h"
#include "tests/apps/node/peer_failure.h"

using gradmesh::testing::Cluster;
using gradmesh::testing::config_text;
using gradmesh::testing::Job;

namespace {

/// local with quorum rounds of 2 of 3 (H = 7, outer "average": this job's raw pixels train
/// poorly under Nesterov's outer step, bsp_failure_test.cpp), long enough to kill a node in.
std::vector<std::string> quorum_args() {
  return {"--save-parameters",        "--set", "sync.local.steps=7", "--set",
          "sync.local.outer=average", "--set", "sync.local.quorum=2"};
}

/// Starts `cluster` and waits until every node is connected and has trained a little.
void start_and_settle(Cluster& cluster) {
  cluster.start(quorum_args());
  for (std::size_t r = 0; r < 3; ++r) {
    REQUIRE(gradmesh::testing::wait_for_text(cluster.log(r), "connected to every peer",
                                             std::chrono::seconds(60)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
}

}  // namespace

TEST_CASE(
    "local with a quorum of 2 of 3, one node SIGKILLed: the other 2 go on without it and "
    "finish with one model",
    "[e2e][local][quorum][failure]") {
  Job job;
  job.iterations = 4000;
  Cluster cluster("local-quorum-kill", 3, config_text(job, "local"));
  start_and_settle(cluster);
  REQUIRE(::kill(cluster.process(2).pid(), SIGKILL) == 0);
  for (std::size_t r = 0; r < 2; ++r) {
    const auto code = cluster.process(r).wait_for(std::chrono::seconds(120));
    INFO(cluster.all_logs());
    REQUIRE(code.has_value());
    CHECK(*code == 0);
  }
  const std::string named = "peer rank 2 (" + cluster.address(2) + ")";
  for (std::size_t r = 0; r < 2; ++r) {
    INFO(cluster.all_logs());
    const auto m = cluster.metrics(r);
    INFO("rank " << r << ": " << m.dump());
    CHECK(m["sync"]["peers_failed"] == 1);
    CHECK(m["sync"]["local_quorum"] == 2);
    CHECK(m["rejected_messages"] == 0);
    CHECK(m["test_accuracy"].get<double>() > 0.7);
    CHECK_THAT(cluster.log_text(r),
               Catch::Contains(named) && Catch::Contains("the quorum rounds go on with 2 of 3"));
  }
  CHECK(cluster.metrics(0)["sync"]["local_merges"].get<double>() > 0);
  CHECK(cluster.parameters(0) == cluster.parameters(1));  // one final model
}

TEST_CASE(
    "local with a quorum of 2 of 3, the leader (rank 0) SIGKILLed: the others stop within "
    "10 s naming it",
    "[e2e][local][quorum][failure]") {
  Job job;
  job.iterations = 1'000'000;  // far longer than the test
  Cluster cluster("local-quorum-leader", 3, config_text(job, "local"));
  start_and_settle(cluster);
  REQUIRE(::kill(cluster.process(0).pid(), SIGKILL) == 0);
  const std::string named = "peer rank 0 (" + cluster.address(0) + ")";
  for (std::size_t r = 1; r < 3; ++r) {
    const auto code = cluster.process(r).wait_for(std::chrono::seconds(10));
    INFO(cluster.all_logs());
    REQUIRE(code.has_value());
    CHECK(*code == 1);
    const std::string log = cluster.log_text(r);
    const auto last_error = log.rfind("[error]");
    REQUIRE(last_error != std::string::npos);
    CHECK_THAT(log.substr(last_error), Catch::Contains(named));
  }
}
