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

}  // namespace gradmesh::app
