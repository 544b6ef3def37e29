#pragma once
// Where a training pipeline's batches come from (issue 12, DESIGN.md "Users' own pipelines"). The
// data source is the first task of every iteration graph; gradmesh's own is DatasetSource (a
// shard of an in-memory data set), a user's is any class implementing DataSource.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tasks/data/dataset.h"
#include "tasks/data/shard_sampler.h"
#include "tasks/data/synthetic.h"
#include "tasks/shape.h"

namespace gradmesh::app {

/// One mini-batch on its way into the model, as the data source writes it and the pre-processing
/// tasks rewrite it in place. The spans are the model's own input buffer and the pipeline's label
/// buffer (host memory): no copy is made between the source, the pre-processing and forward_0.
struct Batch {
  std::span<float> input;          ///< size() samples of sample_shape floats each, NCHW, row-major
  std::span<std::int32_t> labels;  ///< one class per sample, each in [0, classes)
  std::size_t epoch = 0;           ///< 0-based epoch of this batch
  std::size_t iteration = 0;       ///< 0-based index of the batch in its epoch
  [[nodiscard]] std::size_t size() const noexcept { return labels.size(); }
};

/// This node's place in the job, given to the data source before its first batch.
struct ShardInfo {
  std::size_t rank = 0;        ///< this node, in [0, nodes)
  std::size_t nodes = 1;       ///< n
  std::size_t batch_size = 0;  ///< K, samples per node per iteration
  std::uint64_t seed = 0;      ///< job.seed: the same on every node
};

/// A source of training batches: this node's share of the data, K samples per iteration.
///
/// Contract: open() is called once, on the pipeline's thread, before any fill(); fill() is then
/// called once per iteration, in order, from the iteration graph's first task (one thread at a
/// time; never concurrently with itself). fill() is on the hot path: it should not allocate.
/// Every node must return the same iterations_per_epoch() (the nodes step in lockstep under BSP
/// strategies): derive it from the data set size, n and K, as ShardSampler does, not from the
/// node's own shard.
class DataSource {
 public:
  DataSource() = default;
  DataSource(const DataSource&) = delete;
  DataSource& operator=(const DataSource&) = delete;
  virtual ~DataSource() = default;

  /// The shape of one sample (C x H x W; flat features as F x 1 x 1). Fixed for the job.
  [[nodiscard]] virtual tasks::Shape sample_shape() const = 0;
  /// The number of classes its labels take, [0, classes), when the source knows it: the pipeline
  /// then refuses a model with fewer outputs before the first batch (ConfigError). nullopt (the
  /// default): not checked.
  [[nodiscard]] virtual std::optional<std::size_t> classes() const { return std::nullopt; }
  /// Takes this node's place in the job and returns the iterations per epoch (>= 1, the same on
  /// every node). Throws gradmesh::ConfigError when the data gives no full batch per node.
  virtual std::size_t open(const ShardInfo& shard) = 0;
  /// Writes batch (batch.epoch, batch.iteration) of this node's shard into batch.input and
  /// batch.labels (batch.size() samples). Errors thrown here stop the job with the task's name.
  virtual void fill(Batch& batch) = 0;
};

/// The built-in source: this node's shard of an in-memory data set, reshuffled every epoch by the
/// job seed (tasks::ShardSampler: the same shards and batches as every gradmesh release before the
/// API, so runs stay bitwise reproducible). The data set is shared read-only; it must outlive the
/// source. Thread safety: as DataSource.
class DatasetSource final : public DataSource {
 public:
  explicit DatasetSource(const tasks::Dataset& data) : data_(data) {}

  [[nodiscard]] tasks::Shape sample_shape() const override { return tasks::sample_shape(data_); }
  [[nodiscard]] std::optional<std::size_t> classes() const override { return data_.classes; }
  std::size_t open(const ShardInfo& shard) override;
  void fill(Batch& batch) override;

 private:
  const tasks::Dataset& data_;
  std::optional<tasks::ShardSampler> sampler_;
  std::vector<std::size_t> indices_;
};

/// Synthetic examples generated batch by batch (data.dataset = "synthetic"; tasks::SyntheticTask):
/// an epoch of `count` examples, indices 0 .. count - 1, sharded and reshuffled as DatasetSource
/// shards a data set of that size (tasks::ShardSampler), so its batches equal DatasetSource's over
/// task.make(0, count) bit for bit, without holding the data: fill() writes each example from its
/// index (one SplitMix64 draw a float, no allocation). The task must outlive the source. Thread
/// safety: as DataSource.
class SyntheticSource final : public DataSource {
 public:
  SyntheticSource(const tasks::SyntheticTask& task, std::size_t count)
      : task_(task), count_(count) {}

  [[nodiscard]] tasks::Shape sample_shape() const override { return task_.shape(); }
  [[nodiscard]] std::optional<std::size_t> classes() const override { return task_.classes(); }
  std::size_t open(const ShardInfo& shard) override;
  void fill(Batch& batch) override;

 private:
  const tasks::SyntheticTask& task_;
  std::size_t count_;
  std::optional<tasks::ShardSampler> sampler_;
  std::vector<std::size_t> indices_;
};

}  // namespace gradmesh::app
