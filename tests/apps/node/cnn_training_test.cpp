// End-to-end tests of a convolutional model through gradmesh-node: training on one node, and
// the plan command on configs/fashion-mnist-cnn.toml.

#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "tests/apps/node/cluster.h"

using gradmesh::testing::Cluster;

namespace {

constexpr const char* kData = "/usr/share/datasets/fashion-mnist";

}  // namespace

TEST_CASE("a small CNN trains on one node (strategy none) and its loss falls", "[e2e][none][cnn]") {
  // conv 3x3x4 - relu - max pool 2 - flatten - dense 10: 5 epochs of 10 iterations of 32 images
  // (the first 320 training images), each epoch evaluated on 200 test images.
  const std::string config = std::string(R"([job]
name = "small-cnn"
seed = 5
epochs = 5
[data]
path = ")") + kData + R"("
train_limit = 320
test_limit = 200
[model]
layers = ["conv2d:4:3", "relu", "max_pool2d:2", "flatten", "dense:10", "softmax_cross_entropy"]
[optimizer]
lr = 0.05
momentum = 0.9
batch_size = 32
[sync]
strategy = "none"
)";
  Cluster cluster("small-cnn", 1, config);
  cluster.start();
  const auto codes = cluster.wait(std::chrono::seconds(60));
  INFO(cluster.all_logs());
  REQUIRE(codes == std::vector<int>{0});
  const auto m = cluster.metrics(0);
  CHECK(m["iterations"] == 50);
  CHECK(m["parameters"] == 4 * 9 + 4 + 4 * 13 * 13 * 10 + 10);
  const auto losses = m["epoch_train_loss"].get<std::vector<double>>();
  REQUIRE(losses.size() == 5);
  CHECK(losses.back() < 0.75 * losses.front());  // ~2.0 in the first epoch
  CHECK(m["test_accuracy"].get<double>() > 0.5);
}

TEST_CASE("ako and allreduce train the Fashion-MNIST CNN on 2 node processes, loss falling",
          "[e2e][ako][allreduce][cnn]") {
  // configs/fashion-mnist-cnn.toml's model; 1,600 images over 2 nodes at 32 per batch: 25
  // iterations per epoch, 2 epochs = 50 iterations per node.
  // The least accuracy of the job's model, per strategy: allreduce is BSP (64.4% on every
  // run); ako is asynchronous (48.8-71.2% over 30 runs), so three times chance, 6.7 sd under
  // the mean and 18.8 points under the lowest run measured.
  struct Case {
    std::string strategy;
    double min_accuracy;
  };
  for (const auto& [strategy, min_accuracy] : {Case{"ako", 0.3}, Case{"allreduce", 0.5}}) {
    const std::string config = std::string(R"([job]
name = "cnn-)") + strategy + R"("
seed = 11
epochs = 2
[data]
path = ")" + kData + R"("
train_limit = 1600
test_limit = 500
[model]
layers = ["conv2d:32:5:1:2", "relu", "max_pool2d:2", "conv2d:64:5:1:2", "relu", "max_pool2d:2",
          "flatten", "dense:1024", "relu", "dense:10", "softmax_cross_entropy"]
[optimizer]
lr = 0.05
momentum = 0.9
batch_size = 32
[sync]
strategy = ")" + strategy + R"("
[net]
connect_timeout = 30.0
)";
    Cluster cluster("cnn-" + strategy, 2, config);
    cluster.start();
    const auto codes = cluster.wait(std::chrono::seconds(240));
    INFO(strategy << "\n" << cluster.all_logs());
    REQUIRE(codes == std::vector<int>{0, 0});
    // What was measured (2026-11-24, 2-core machine beside two -j2 builds, load average 5-8):
    //  - ako, 30 runs: the job's model (the replicas' mean, the same on both nodes) at 48.8-71.2%
    //    test accuracy (mean 64.8%, sd 5.2 points; a CI run had 45.8%) and test loss 0.77-1.29
    //    (mean 1.00, sd 0.15); the replicas at 47.0-74.8%; each replica's second-epoch training
    //    loss 0.50-0.67 of its first (mean 0.57, sd 0.04; 60 replicas).
    //  - allreduce (BSP: the same bits every run): 64.4%, test loss 0.857, ratios 0.54.
    // Accuracy after 50 asynchronous iterations is too noisy a measure of "loss falling" (a
    // 50% threshold failed in 1 of those 30 runs); the checks below are the loss itself, with
    // wide margins, and an accuracy far above chance.
    constexpr double kUntrainedLoss = 2.302585;  // ln 10: a model that has learnt nothing
    for (std::size_t r = 0; r < 2; ++r) {
      const auto m = cluster.metrics(r);
      CHECK(m["iterations"] == 50);
      CHECK(m["strategy"] == strategy);
      CHECK(m["rejected_messages"] == 0);
      const auto losses = m["epoch_train_loss"].get<std::vector<double>>();
      REQUIRE(losses.size() == 2);
      INFO("rank " << r << ": epoch losses " << losses[0] << ", " << losses[1]
                   << "; the job's model: test loss " << m["final_test_loss"].get<double>()
                   << ", accuracy " << m["final_test_accuracy"].get<double>());
      // Each node's training loss falls (ratio measured 0.50-0.67: 0.8 is 6 sd above the mean).
      CHECK(losses[1] < 0.8 * losses[0]);
      // The job's model: its test loss at most 0.8 of an untrained model's (1.84, against at
      // most 1.29 measured: 5.7 sd above the mean).
      CHECK(m["final_test_loss"].get<double>() < 0.8 * kUntrainedLoss);
      CHECK(m["final_test_accuracy"].get<double>() > min_accuracy);
    }
  }
}

TEST_CASE("the plan of configs/fashion-mnist-cnn.toml puts its conv layers on PS",
          "[e2e][plan][cnn]") {
  const auto dir = gradmesh::testing::fresh_directory("cnn-plan");
  const auto log = dir / "plan.txt";
  gradmesh::testing::Process plan(
      {GRADMESH_NODE_BINARY, "plan", "--config",
       std::string(GRADMESH_SOURCE_DIR) + "/configs/fashion-mnist-cnn.toml", "--nodes", "4",
       "--set", "planner.probe=false"},
      log);
  REQUIRE(plan.wait_for(std::chrono::seconds(60)) == 0);
  const std::string text = gradmesh::testing::read_file(log);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("strategy poseidon, 4 node(s), batch 64 per node, 3274634 "
                                   "parameters"));
  std::istringstream lines(text);
  std::size_t conv_rows = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("conv2d") == std::string::npos) continue;
    ++conv_rows;
    CHECK_THAT(line, Catch::Contains("  PS  "));
  }
  CHECK(conv_rows == 2);
}

TEST_CASE("ako trains a residual network with batch normalization on 2 node processes",
          "[e2e][ako][graph]") {
  // A model graph (issue 29): a stem, an identity block and a projection block, global average
  // pooling; 1,600 images over 2 nodes at 32 per batch: 25 iterations per epoch, 2 epochs.
  const std::string config = std::string(R"([job]
name = "resnet-ako"
seed = 13
epochs = 2
[data]
path = ")") + kData + R"("
normalize = "standardize"
train_limit = 1600
test_limit = 500
[model]
layers = ["conv2d:8:3:1:1", "batch_norm", "relu", "basic_block:8", "basic_block:16:2",
          "global_avg_pool", "dense:10", "softmax_cross_entropy"]
[optimizer]
lr = 0.05
momentum = 0.9
batch_size = 32
[sync]
strategy = "ako"
[net]
connect_timeout = 30.0
)";
  // Measured (2026-11-27, 6 runs, 12 replicas): each replica's second-epoch training loss
  // 0.693-0.708 of its first; 0.8 is far outside that spread. The test accuracy after 50
  // iterations is no measure here: the job's model read 20.6-45.4% (evaluation uses the running
  // statistics, which lag a network still changing fast; allreduce read 12% after the first
  // epoch with the training loss falling), so it is not asserted.
  constexpr double kLossRatio = 0.8;
  Cluster cluster("resnet-ako", 2, config);
  cluster.start();
  const auto codes = cluster.wait(std::chrono::seconds(240));
  INFO(cluster.all_logs());
  REQUIRE(codes == std::vector<int>{0, 0});
  for (std::size_t r = 0; r < 2; ++r) {
    const auto m = cluster.metrics(r);
    CHECK(m["iterations"] == 50);
    CHECK(m["rejected_messages"] == 0);
    const auto losses = m["epoch_train_loss"].get<std::vector<double>>();
    REQUIRE(losses.size() == 2);
    INFO("rank " << r << ": epoch losses " << losses[0] << ", " << losses[1]
                 << "; the job's model: test loss " << m["final_test_loss"].get<double>()
                 << ", accuracy " << m["final_test_accuracy"].get<double>());
    CHECK(losses[1] < kLossRatio * losses[0]);
  }
  // The job's model (sync.ako.final = "average") is the mean of the replicas and of their
  // batch-normalization running statistics: one model, so one test loss on both nodes.
  CHECK(cluster.metrics(0)["final_test_loss"] == cluster.metrics(1)["final_test_loss"]);
}
