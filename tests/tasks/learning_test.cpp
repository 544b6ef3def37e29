// End-to-end sanity check of tasks/: the demo MLP learns real Fashion-MNIST on one node.

#include <catch2/catch.hpp>
#include <filesystem>
#include <vector>

#include "tasks/cpu/blas.h"
#include "tasks/data/fashion_mnist.h"
#include "tasks/data/shard_sampler.h"
#include "tasks/model.h"
#include "tasks/optim/sgd.h"

namespace gradmesh::tasks {

TEST_CASE("demo MLP fits 2000 Fashion-MNIST images in 3 passes", "[tasks][learning]") {
  if (!std::filesystem::is_directory(kFashionMnistDefaultDir)) {
    WARN("skipped: " << kFashionMnistDefaultDir
                     << " is absent (install the Debian package dataset-fashion-mnist)");
    return;
  }
  constexpr std::size_t kExamples = 2000, kBatch = 32, kPasses = 3;
  const Dataset train = take_first(load_fashion_mnist(kFashionMnistDefaultDir).train, kExamples);
  REQUIRE(train.count == kExamples);
  REQUIRE(train.features == 784);

  Model model(parse_layer_specs(
                  {"dense:256", "relu", "dense:256", "relu", "dense:10", "softmax_cross_entropy"}),
              train.features, kBatch, 2024);
  const Sgd sgd({0.05f, 0.9f, 0.0f});
  std::vector<float> velocity(model.parameter_count(), 0.0f);
  ShardSampler sampler(train.count, 1, 0, kBatch, 7);
  std::vector<std::size_t> idx(kBatch);
  std::vector<std::int32_t> labels(kBatch);

  const double before = model.evaluate(train).accuracy;
  for (std::size_t epoch = 0; epoch < kPasses; ++epoch) {
    for (std::size_t it = 0; it < sampler.iterations_per_epoch(); ++it) {
      sampler.batch_indices(epoch, it, idx);
      gather_batch(train, idx, model.input(kBatch), labels);
      for (std::size_t l = 0; l < model.num_layers(); ++l) model.forward_layer(l, kBatch);
      model.loss_backward(labels);
      for (std::size_t l = model.num_layers(); l-- > 0;) model.backward_layer(l, kBatch);
      sgd.step(model.parameters(), model.gradients(), velocity);
    }
  }
  const auto after = model.evaluate(train);
  INFO("accuracy before " << before << ", after " << after.accuracy << ", loss " << after.loss);
  CHECK(after.accuracy > 0.70);
}

}  // namespace gradmesh::tasks
