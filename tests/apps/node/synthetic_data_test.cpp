// End-to-end tests of synthetic data (data.dataset = "synthetic", issue 29 item 4) through
// gradmesh-node: no files, any input shape, and the keys' errors.

#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tasks/data/synthetic.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/model.h"
#include "tests/apps/node/cluster.h"

using gradmesh::testing::Cluster;
namespace tasks = gradmesh::tasks;

namespace {

/// A job on synthetic 3 x 8 x 8 images in `classes` classes, a small CNN of `outputs` outputs
/// (`layers`: its hidden layers, before the classifier); data.path names no folder: nothing is
/// read.
std::string synthetic_config(
    std::size_t classes, std::size_t outputs,
    const std::string& layers = R"("conv2d:4:3:1:1", "relu", "max_pool2d:2", "flatten")") {
  return R"([job]
name = "synthetic"
seed = 3
epochs = 3
[data]
dataset = "synthetic"
path = "/nonexistent/gradmesh-test"
shape = [3, 8, 8]
classes = )" +
         std::to_string(classes) +
         R"(
train_limit = 640
test_limit = 200
[model]
layers = [)" +
         layers + R"(, "dense:)" + std::to_string(outputs) +
         R"(", "softmax_cross_entropy"]
[optimizer]
lr = 0.05
momentum = 0.9
batch_size = 32
[sync]
strategy = "allreduce"
)";
}

}  // namespace

TEST_CASE("synthetic data trains on 2 node processes without files, replicas equal",
          "[e2e][data][synthetic]") {
  Cluster cluster("synthetic-2", 2, synthetic_config(10, 10));
  cluster.start({"--save-parameters"});
  const auto codes = cluster.wait(std::chrono::seconds(120));
  INFO(cluster.all_logs());
  REQUIRE(codes == std::vector<int>{0, 0});
  CHECK_THAT(cluster.log_text(0),
             Catch::Contains("synthetic data: 640 samples of 3x8x8 in 10 classes an epoch") &&
                 Catch::Contains("a test set of 200"));
  const auto m = cluster.metrics(0);
  CHECK(m["iterations"] == 30);  // 640 / 2 nodes / 32 a batch = 10 an epoch, 3 epochs
  CHECK(m["parameters"] == 3 * 9 * 4 + 4 + 4 * 4 * 4 * 10 + 10);
  const auto losses = m["epoch_train_loss"].get<std::vector<double>>();
  REQUIRE(losses.size() == 3);
  CHECK(losses.back() < 0.5 * losses.front());
  CHECK(m["test_accuracy"].get<double>() > 0.5);          // chance: 0.1
  CHECK(cluster.parameters(0) == cluster.parameters(1));  // BSP: one model
}

TEST_CASE("batch_norm and avg_pool2d train on 2 node processes, parameters equal, loss falling",
          "[e2e][data][synthetic][batch_norm]") {
  // Per-node batch statistics (as DDP): the gradients are averaged, so the parameters stay one
  // model; each node keeps its own running statistics.
  Cluster cluster("synthetic-bn", 2,
                  synthetic_config(10, 10,
                                   R"("conv2d:4:3:1:1", "batch_norm", "relu", "avg_pool2d:2", )"
                                   R"("flatten", "dense:16", "batch_norm", "relu")"));
  cluster.start({"--save-parameters"});
  const auto codes = cluster.wait(std::chrono::seconds(120));
  INFO(cluster.all_logs());
  REQUIRE(codes == std::vector<int>{0, 0});
  const auto m = cluster.metrics(0);
  const auto losses = m["epoch_train_loss"].get<std::vector<double>>();
  REQUIRE(losses.size() == 3);
  CHECK(losses.back() < 0.5 * losses.front());
  CHECK(m["test_accuracy"].get<double>() > 0.5);  // chance: 0.1
  CHECK(cluster.parameters(0) == cluster.parameters(1));
}

TEST_CASE(
    "synthetic data's keys: fewer classes than outputs run, more or a shape for Fashion-MNIST are "
    "refused",
    "[e2e][data][synthetic][config]") {
  {  // fewer classes than outputs: trains and evaluates
    Cluster cluster("synthetic-fewer-classes", 1, synthetic_config(5, 10));
    cluster.start();
    const auto codes = cluster.wait(std::chrono::seconds(60));
    INFO(cluster.all_logs());
    CHECK(codes == std::vector<int>{0});
  }
  {
    Cluster cluster("synthetic-classes", 1, synthetic_config(12, 10));
    cluster.start();
    const auto codes = cluster.wait(std::chrono::seconds(60));
    INFO(cluster.all_logs());
    CHECK(codes == std::vector<int>{2});
    CHECK_THAT(cluster.log_text(0), Catch::Contains("labels take 12 classes") &&
                                        Catch::Contains("gives 10 outputs") &&
                                        Catch::Contains("data.classes"));
  }
  {
    Cluster cluster("synthetic-shape", 1,
                    R"([model]
layers = ["dense:10", "softmax_cross_entropy"]
[data]
shape = [3, 8, 8]
)");
    cluster.start();
    const auto codes = cluster.wait(std::chrono::seconds(60));
    INFO(cluster.all_logs());
    CHECK(codes == std::vector<int>{2});
    CHECK_THAT(cluster.log_text(0),
               Catch::Contains("data.shape applies to data.dataset = \"synthetic\""));
  }
}

TEST_CASE("split evaluation gives every node the whole test set's accuracy exactly",
          "[e2e][data][evaluation]") {
  // 3 nodes, 301 test examples: shares of 100, 100 and 101. The reference scores the whole set
  // with the saved replica in this process.
  std::string config = synthetic_config(10, 10);
  config.replace(config.find("test_limit = 200"), 16, "test_limit = 301");
  Cluster cluster("split-evaluation", 3, config);
  cluster.start({"--save-parameters"});
  const auto codes = cluster.wait(std::chrono::seconds(180));
  INFO(cluster.all_logs());
  REQUIRE(codes == std::vector<int>{0, 0, 0});
  CHECK_THAT(cluster.log_text(2),
             Catch::Contains("evaluation split over the 3 nodes: rank r scores test examples [r N "
                             "/ n, (r + 1) N / n) of the N = 301"));
  const tasks::SyntheticTask task(tasks::Shape{3, 8, 8}, 10, 3);
  const tasks::Dataset test = task.make(tasks::kSyntheticTestBase, 301);
  tasks::Model model(tasks::parse_layer_specs({"conv2d:4:3:1:1", "relu", "max_pool2d:2", "flatten",
                                               "dense:10", "softmax_cross_entropy"}),
                     tasks::Shape{3, 8, 8}, 32, 3);
  const std::vector<float> parameters = cluster.parameters(0);
  REQUIRE(parameters.size() == model.parameters().size());
  std::copy(parameters.begin(), parameters.end(), model.parameters().begin());
  const tasks::Model::Evaluation whole = model.evaluate(test);
  for (std::size_t rank = 0; rank < 3; ++rank) {
    const auto m = cluster.metrics(rank);
    INFO("rank " << rank);
    CHECK(m["test_accuracy"].get<double>() == whole.accuracy);  // bit for bit
    CHECK(m["test_loss"].get<double>() == Approx(whole.loss).epsilon(1e-6));
  }
}

TEST_CASE("a BSP job's batch-normalization statistics are averaged at its end: one final model",
          "[e2e][data][evaluation]") {
  Cluster cluster(
      "bn-average", 2,
      synthetic_config(10, 10, R"("conv2d:4:3:1:1", "batch_norm", "relu", "global_avg_pool")"));
  cluster.start();
  const auto codes = cluster.wait(std::chrono::seconds(120));
  INFO(cluster.all_logs());
  REQUIRE(codes == std::vector<int>{0, 0});
  for (std::size_t rank = 0; rank < 2; ++rank) {
    CHECK_THAT(cluster.log_text(rank),
               Catch::Contains("batch normalization's running statistics averaged over the 2 "
                               "nodes (8 floats)") &&
                   Catch::Contains("with the running statistics averaged over the nodes: test "
                                   "accuracy"));
  }
  // The same final model on both nodes, scored on the split test set: one figure.
  CHECK(cluster.metrics(0)["final_test_accuracy"] == cluster.metrics(1)["final_test_accuracy"]);
}
