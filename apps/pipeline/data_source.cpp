#include "apps/pipeline/data_source.h"

#include "engine/error.h"

namespace gradmesh::app {

std::size_t DatasetSource::open(const ShardInfo& shard) {
  sampler_.emplace(data_.count, shard.nodes, shard.rank, shard.batch_size, shard.seed);
  indices_.assign(shard.batch_size, 0);
  return sampler_->iterations_per_epoch();
}

void DatasetSource::fill(Batch& batch) {
  GRADMESH_CHECK(sampler_.has_value(), "DatasetSource::fill before open");
  sampler_->batch_indices(batch.epoch, batch.iteration, indices_);
  tasks::gather_batch(data_, indices_, batch.input, batch.labels);
}

std::size_t SyntheticSource::open(const ShardInfo& shard) {
  sampler_.emplace(count_, shard.nodes, shard.rank, shard.batch_size, shard.seed);
  indices_.assign(shard.batch_size, 0);
  return sampler_->iterations_per_epoch();
}

void SyntheticSource::fill(Batch& batch) {
  GRADMESH_CHECK(sampler_.has_value(), "SyntheticSource::fill before open");
  const std::size_t features = task_.features();
  GRADMESH_CHECK_EQ(batch.input.size(), batch.size() * features,
                    "SyntheticSource::fill: input floats");
  GRADMESH_CHECK_EQ(batch.size(), indices_.size(), "SyntheticSource::fill: batch size");
  sampler_->batch_indices(batch.epoch, batch.iteration, indices_);
  for (std::size_t i = 0; i < indices_.size(); ++i) {
    task_.write(indices_[i], batch.input.subspan(i * features, features));
    batch.labels[i] = task_.label(indices_[i]);
  }
}

}  // namespace gradmesh::app
