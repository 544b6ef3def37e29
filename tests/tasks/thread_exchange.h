#pragma once
// SyncBN's statistics exchange (tasks::BatchStatisticsExchange) among threads of one process: n
// models, one a thread, meet at a barrier -- the nodes of a job without the network. For tests of
// synchronized batch normalization and for references that run the nodes' algorithm in-process.

#include <algorithm>
#include <barrier>
#include <cstddef>
#include <span>
#include <vector>

#include "tasks/layers/batch_norm.h"

namespace gradmesh::testing {

/// The meeting point of `nodes` ThreadExchanges.
struct ThreadGather {
  explicit ThreadGather(std::size_t n) : nodes(n), barrier(static_cast<std::ptrdiff_t>(n)) {}
  std::size_t nodes;
  std::barrier<> barrier;
  std::vector<std::vector<float>> rows = std::vector<std::vector<float>>(nodes);
  std::size_t calls = 0;  ///< gathers done (counted by rank 0)
};

/// Rank `rank`'s side: all_gather blocks until every rank's thread called it.
class ThreadExchange final : public tasks::BatchStatisticsExchange {
 public:
  ThreadExchange(ThreadGather& gather, std::size_t rank) : gather_(gather), rank_(rank) {}
  void all_gather(std::span<const float> mine, std::span<float> all) override {
    gather_.rows[rank_].assign(mine.begin(), mine.end());
    gather_.barrier.arrive_and_wait();
    for (std::size_t r = 0; r < gather_.nodes; ++r) {
      std::copy(gather_.rows[r].begin(), gather_.rows[r].end(),
                all.begin() + static_cast<std::ptrdiff_t>(r * mine.size()));
    }
    if (rank_ == 0) ++gather_.calls;
    gather_.barrier.arrive_and_wait();  // every rank read the rows before they are rewritten
  }
  [[nodiscard]] std::size_t nodes() const noexcept override { return gather_.nodes; }

 private:
  ThreadGather& gather_;
  std::size_t rank_;
};

}  // namespace gradmesh::testing
