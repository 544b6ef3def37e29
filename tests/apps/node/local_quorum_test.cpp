// End-to-end tests of strategy local's quorum rounds (sync/local/quorum_rounds.h; issue 57, item
// 5): real gradmesh-node processes on 127.0.0.1, a peer SIGKILLed mid-job. Without quorum rounds
// local rolls back to checkpoints (bsp_failure_test.cpp).

#include <signal.h>

#include <chrono>
#include <optional>
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

TEST_CASE(
    "local with a quorum of 2 of 3, one node SIGKILLed and restarted with --rejoin: it goes on "
    "from rank 0's global model and the 3 finish with one model",
    "[e2e][local][quorum][failure][rejoin]") {
  // Issue 57, item 5: "a restarted node with --rejoin takes a live replica and outer state at
  // the next round". Quorum rounds need no checkpoint: rank 0 sends its newest version.
  Job job;
  job.iterations = 5000;  // long enough for the restart (it rejoined at iteration 127 of 40,000)
  Cluster cluster("local-quorum-rejoin", 3, config_text(job, "local"));
  std::vector<std::string> args = quorum_args();
  args.insert(args.end(), {"--set", "job.epochs=4"});
  cluster.start(args);
  for (std::size_t r = 0; r < 3; ++r) {
    REQUIRE(gradmesh::testing::wait_for_text(cluster.log(r), "connected to every peer",
                                             std::chrono::seconds(60)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  cluster.process(2).kill_now();
  REQUIRE(gradmesh::testing::wait_for_text(cluster.log(0), "the quorum rounds go on",
                                           std::chrono::seconds(60)));
  const auto [joiner_code, codes, joiner_log] = gradmesh::testing::rejoin_and_finish(cluster, 2);
  INFO(cluster.all_logs() << "\n--- restarted rank 2:\n" << joiner_log);
  REQUIRE(joiner_code.has_value());
  CHECK(*joiner_code == 0);
  CHECK_THAT(joiner_log, Catch::Contains("rejoined from rank 0's global model"));
  for (std::size_t r = 0; r < 2; ++r) {
    REQUIRE(codes[r].has_value());
    CHECK(*codes[r] == 0);
    CHECK_THAT(cluster.log_text(r), Catch::Contains("rank 2 restarted and rejoined"));
  }
  const auto joined = cluster.metrics(2);
  INFO(joined.dump());
  CHECK(joined["rejoined"] == true);
  CHECK(joined["resumed_from_iteration"].get<std::uint64_t>() > 0);
  CHECK(joined["test_accuracy"].get<double>() > 0.7);
  CHECK(cluster.parameters(0) == cluster.parameters(1));
  CHECK(cluster.parameters(0) == cluster.parameters(2));  // one final model, the joiner's too
}
