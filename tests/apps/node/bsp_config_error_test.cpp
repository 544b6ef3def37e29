// End-to-end tests of the errors a BSP job's user meets first: nodes with different configs, a
// bad key, a missing data set; real gradmesh-node processes on 127.0.0.1.

#include <string>

#include <catch2/catch.hpp>

#include "tests/apps/node/bsp_job.h"
#include "tests/apps/node/cluster.h"

using gradmesh::testing::Cluster;
using gradmesh::testing::config_text;
using gradmesh::testing::Job;

TEST_CASE("nodes with different configs refuse each other with a clear error", "[e2e][handshake]") {
  Cluster cluster("config-mismatch", 2, config_text(Job{}, "ps"));
  cluster.start({}, [](std::size_t rank) {
    return rank == 1 ? std::vector<std::string>{"--set", "optimizer.lr=0.07"}
                     : std::vector<std::string>{};
  });
  const auto codes = cluster.wait(std::chrono::seconds(60));
  INFO(cluster.all_logs());
  CHECK(codes[0] != 0);
  CHECK(codes[1] != 0);
  // Both nodes name the key and both values, each side by its rank.
  for (std::size_t rank = 0; rank < 2; ++rank) {
    CHECK_THAT(cluster.log_text(rank), Catch::Contains("config differs: optimizer.lr = 0.07 on "
                                                       "rank 1, ") &&
                                           Catch::Contains(" on rank 0"));
  }
}

TEST_CASE("a bad config key is an error naming the key", "[e2e][config]") {
  Cluster cluster("bad-key", 1, config_text(Job{}, "none"));
  cluster.start({"--set", "optimizer.lrr=0.1"});
  const auto codes = cluster.wait(std::chrono::seconds(30));
  CHECK(codes == std::vector<int>{2});
  CHECK_THAT(cluster.log_text(0), Catch::Contains("optimizer.lrr"));
}

TEST_CASE("a data.path without the data set is a config error naming the key and the folder",
          "[e2e][config]") {
  Cluster cluster("bad-data-path", 1, config_text(Job{}, "none"));
  const std::string path = (cluster.dir() / "no-data-here").string();
  cluster.start({"--set", "data.path=" + path});
  const auto codes = cluster.wait(std::chrono::seconds(30));
  INFO(cluster.log_text(0));
  CHECK(codes == std::vector<int>{2});
  CHECK_THAT(cluster.log_text(0), Catch::Contains("data.path = \"" + path + "\": "));
}

TEST_CASE("model.sync_batch_norm under ako is a config error naming the key", "[e2e][config]") {
  // Ako's replicas differ: there is no one global batch to normalize by.
  Job job;
  job.layers = {"dense:16", "batch_norm", "relu", "dense:10", "softmax_cross_entropy"};
  Cluster cluster("sync-bn-ako", 2, config_text(job, "ako"));
  cluster.start({"--set", "model.sync_batch_norm=true"});
  const auto codes = cluster.wait(std::chrono::seconds(60));
  INFO(cluster.all_logs());
  CHECK(codes == std::vector<int>{2, 2});
  CHECK_THAT(cluster.log_text(0), Catch::Contains("model.sync_batch_norm = true needs a BSP "
                                                  "strategy") &&
                                      Catch::Contains("under ako"));
}
