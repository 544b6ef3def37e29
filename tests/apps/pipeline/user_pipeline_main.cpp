// A pipeline program written as a user would write one against the public API (apps/pipeline/):
// its own DataSource class (the node's shard of Fashion-MNIST, batch by batch from
// tasks::ShardSampler, rows copied by hand) and its own evaluation. api_pipeline_test runs it on
// 2 nodes and checks that it trains bitwise the same weights as gradmesh-node. A job named
// "api-noise" also adds input noise from a stream of its own, saved in the node's checkpoints
// (Pipeline::add_checkpoint_state), so that a resumed run draws what the uninterrupted one does.

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "apps/pipeline/pipeline.h"
#include "tasks/data/fashion_mnist.h"
#include "tasks/data/shard_sampler.h"
#include "tasks/random.h"

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

/// Pre-processing with state: noise in [0, 0.01) on every input, from the calls-th stream of the
/// job seed. The call count is the state a checkpoint must carry.
struct InputNoise final : gradmesh::engine::Checkpointable {
  std::uint64_t seed = 0;
  std::uint64_t calls = 0;
  void apply(gradmesh::app::Batch& batch) {
    gradmesh::tasks::SplitMix64 rng(gradmesh::tasks::derive_seed(seed, calls++));
    for (float& x : batch.input) x += 0.01f * rng.next_float();
  }
  void save_state(gradmesh::engine::StateWriter& out) override { out.write_u64(calls); }
  void load_state(gradmesh::engine::StateReader& in) override { calls = in.read_u64(); }
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
    InputNoise noise;
    if (config.job.name == "api-noise") {
      noise.seed = config.job.seed;
      pipeline.add_preprocess(
          "noise", [&noise](gradmesh::app::Batch& batch, gradmesh::engine::TaskContext&) {
            noise.apply(batch);
          });
      pipeline.add_checkpoint_state("noise", noise);
    }
    pipeline.run();
  });
}
