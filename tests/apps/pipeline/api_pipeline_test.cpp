// The public pipeline API end to end: a program built on it (user_pipeline_main.cpp, with a data
// source of its own) against gradmesh-node, as real node processes on 127.0.0.1.

#include <cstring>
#include <string>

#include <catch2/catch.hpp>

#include "tests/apps/node/cluster.h"

using gradmesh::testing::Cluster;

namespace {

std::string job_toml(const std::string& name = "api") {
  return "[job]\nname = \"" + name +
         "\"\nseed = 11\nepochs = 1\nmax_iterations = 20\n"
         "[data]\npath = \"/usr/share/datasets/fashion-mnist\"\ntest_limit = 500\n"
         "[model]\nlayers = [\"dense:64\", \"relu\", \"dense:10\", \"softmax_cross_entropy\"]\n"
         "[optimizer]\nlr = 0.05\nmomentum = 0.9\nbatch_size = 32\n"
         "[sync]\nstrategy = \"ps\"\n[net]\nconnect_timeout = 20.0\n";
}

}  // namespace

TEST_CASE("a pipeline built through the API trains bitwise the same weights as gradmesh-node",
          "[pipeline][e2e]") {
  Cluster node("api-node", 2, job_toml());
  node.start({"--save-parameters"});
  REQUIRE(node.wait(std::chrono::seconds(120)) == std::vector<int>{0, 0});

  Cluster user("api-user", 2, job_toml());
  user.set_binary(GRADMESH_USER_PIPELINE_BINARY);
  user.start({"--save-parameters"});
  const auto codes = user.wait(std::chrono::seconds(120));
  INFO(user.all_logs());
  REQUIRE(codes == std::vector<int>{0, 0});

  for (std::size_t rank = 0; rank < 2; ++rank) {
    const auto expected = node.parameters(rank);
    const auto got = user.parameters(rank);
    REQUIRE(expected.size() == 64 * 784 + 64 + 10 * 64 + 10);
    REQUIRE(got.size() == expected.size());
    CHECK(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)) == 0);
    CHECK(user.metrics(rank)["iterations"] == 20);
    CHECK(user.metrics(rank)["strategy"] == "ps");
    CHECK(user.metrics(rank)["test_accuracy"] == node.metrics(rank)["test_accuracy"]);
  }
}

TEST_CASE("a user's own checkpoint state resumes bitwise with the pipeline's",
          "[pipeline][e2e][resume]") {
  // The program's noise stream is a section of its own (Pipeline::add_checkpoint_state): stopped
  // at 12 and resumed to 20, it ends with the weights of the run that went through.
  const std::string toml = job_toml("api-noise");
  Cluster whole("api-noise-whole", 2, toml);
  whole.set_binary(GRADMESH_USER_PIPELINE_BINARY);
  whole.start({"--save-parameters"});
  REQUIRE(whole.wait(std::chrono::seconds(120)) == std::vector<int>{0, 0});

  Cluster first("api-noise-first", 2, toml);
  const std::string ckpt = (first.dir() / "ckpt").string();
  first.set_binary(GRADMESH_USER_PIPELINE_BINARY);
  first.start({"--set", "checkpoint.dir=" + ckpt, "--set", "checkpoint.every=4", "--set",
               "job.max_iterations=12"});
  REQUIRE(first.wait(std::chrono::seconds(120)) == std::vector<int>{0, 0});

  Cluster second("api-noise-second", 2, toml);
  second.set_binary(GRADMESH_USER_PIPELINE_BINARY);
  second.start({"--save-parameters", "--resume", ckpt});
  const auto codes = second.wait(std::chrono::seconds(120));
  INFO(second.all_logs());
  REQUIRE(codes == std::vector<int>{0, 0});
  for (std::size_t rank = 0; rank < 2; ++rank) {
    const auto expected = whole.parameters(rank);
    const auto got = second.parameters(rank);
    REQUIRE(got.size() == expected.size());
    CHECK(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)) == 0);
    CHECK(second.metrics(rank)["resumed_from_iteration"] == 12);
  }
}
