// A pipeline program written as a user would write one against the public API (apps/pipeline/):
// its own DataSource class (the node's shard of Fashion-MNIST, batch by batch from
// tasks::ShardSampler, rows copied by hand) and its own evaluation. api_pipeline_test runs it on
// 2 nodes and checks that it trains bitwise the same weights as gradmesh-node.

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "apps/pipeline/pipeline.h"
#include "tasks/data/fashion_mnist.h"
#include "tasks/data/shard_sampler.h"

namespace {

class ShardSource final : public gradmesh::app::DataSource {
 public:
  explicit ShardSource(const gradmesh::tasks::Dataset& data) : data_(data) {}

  [[nodiscard]] gradmesh::tasks::Shape sample_shape() const override {
    return gradmesh::tasks::sample_shape(data_);
  }

  std::size_t open(const gradmesh::app::ShardInfo& shard) override {
    sampler_.emplace(data_.count, shard.nodes, shard.rank, shard.batch_size, shard.seed);
    indices_.resize(shard.batch_size);
    return sampler_->iterations_per_epoch();
  }

  void fill(gradmesh::app::Batch& batch) override {
    sampler_->batch_indices(batch.epoch, batch.iteration, indices_);
    const std::size_t features = data_.features;
    for (std::size_t i = 0; i < indices_.size(); ++i) {
      const float* row = data_.x.data() + indices_[i] * features;
      std::copy(row, row + features, batch.input.data() + i * features);
      batch.labels[i] = data_.y[indices_[i]];
    }
  }

 private:
  const gradmesh::tasks::Dataset& data_;
  std::optional<gradmesh::tasks::ShardSampler> sampler_;
  std::vector<std::size_t> indices_;
};

}  // namespace

int main(int argc, char** argv) {
  const auto cli = gradmesh::app::parse_node_command_line(argc, argv, "user-pipeline");
  if (!cli.options) return cli.exit_status;
  return gradmesh::app::run_main([&] {
    gradmesh::app::Pipeline pipeline(*cli.options);
    const auto& config = pipeline.config();
    gradmesh::tasks::TrainTest data = gradmesh::tasks::load_fashion_mnist(config.data.path);
    if (config.data.train_limit) {
      data.train = gradmesh::tasks::take_first(data.train, *config.data.train_limit);
    }
    if (config.data.test_limit) {
      data.test = gradmesh::tasks::take_first(data.test, *config.data.test_limit);
    }
    pipeline.set_source(std::make_unique<ShardSource>(data.train));
    pipeline.set_evaluation([&data](gradmesh::tasks::Model& m) { return m.evaluate(data.test); });
    pipeline.run();
  });
}
