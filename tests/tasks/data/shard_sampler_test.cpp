#include "tasks/data/shard_sampler.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <vector>

#include "engine/error.h"

namespace gradmesh::tasks {

TEST_CASE("shards are disjoint and covering and balanced (60000 over 7)", "[tasks][shard]") {
  const std::size_t n = 60000, nodes = 7, batch = 64;
  std::vector<int> seen(n, 0);
  std::size_t smallest = n, largest = 0;
  for (std::size_t r = 0; r < nodes; ++r) {
    const ShardSampler s(n, nodes, r, batch, 1234);
    smallest = std::min(smallest, s.shard_size());
    largest = std::max(largest, s.shard_size());
    for (const std::size_t i : s.shard()) {
      REQUIRE(i < n);
      ++seen[i];
    }
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  CHECK(largest - smallest <= 1);
  CHECK(largest != smallest);  // 60000 / 7 is uneven
}

TEST_CASE("iterations_per_epoch is floor(smallest shard / batch) on every rank", "[tasks][shard]") {
  CHECK(ShardSampler::iterations_per_epoch(60000, 7, 64) == (60000 / 7) / 64);
  CHECK(ShardSampler::iterations_per_epoch(100, 3, 10) == 3);  // shards 33, 33, 34
  for (std::size_t r = 0; r < 7; ++r) {
    CHECK(ShardSampler(60000, 7, r, 64, 5).iterations_per_epoch() ==
          ShardSampler::iterations_per_epoch(60000, 7, 64));
  }
  CHECK_THROWS_AS(ShardSampler::iterations_per_epoch(10, 4, 3), ConfigError);
  CHECK_THROWS_AS(ShardSampler::iterations_per_epoch(10, 0, 3), ConfigError);
  CHECK_THROWS_AS(ShardSampler::iterations_per_epoch(10, 1, 0), ConfigError);
  CHECK_THROWS_AS(ShardSampler(100, 3, 3, 10, 0), ConfigError);
}

TEST_CASE("shards depend on the seed only: the same on every node", "[tasks][shard]") {
  const ShardSampler a(1000, 4, 2, 8, 77), b(1000, 4, 2, 8, 77), c(1000, 4, 2, 8, 78);
  CHECK(std::equal(a.shard().begin(), a.shard().end(), b.shard().begin(), b.shard().end()));
  CHECK(!std::equal(a.shard().begin(), a.shard().end(), c.shard().begin(), c.shard().end()));
}

TEST_CASE("batch_indices is deterministic and inside the shard and each epoch permutes",
          "[tasks][shard]") {
  const std::size_t n = 6000, nodes = 7, batch = 32;
  ShardSampler s(n, nodes, 3, batch, 99);
  ShardSampler t(n, nodes, 3, batch, 99);
  const std::set<std::size_t> shard(s.shard().begin(), s.shard().end());
  const std::size_t iters = s.iterations_per_epoch();
  std::vector<std::size_t> out(batch), again(batch);

  auto epoch_sequence = [&](ShardSampler& sampler, std::size_t epoch) {
    std::vector<std::size_t> all;
    for (std::size_t it = 0; it < iters; ++it) {
      sampler.batch_indices(epoch, it, out);
      all.insert(all.end(), out.begin(), out.end());
    }
    return all;
  };
  const auto e0 = epoch_sequence(s, 0);
  const auto e1 = epoch_sequence(s, 1);
  // Within an epoch: all in the shard, no repeats.
  std::set<std::size_t> distinct(e0.begin(), e0.end());
  CHECK(distinct.size() == e0.size());
  CHECK(std::all_of(e0.begin(), e0.end(), [&](std::size_t i) { return shard.count(i) == 1; }));
  // Epochs differ, and depend only on (seed, epoch, rank, iteration), not on call history.
  CHECK(e0 != e1);
  CHECK(epoch_sequence(t, 1) == e1);
  CHECK(epoch_sequence(t, 0) == e0);
  s.batch_indices(1, 5, out);
  t.batch_indices(1, 5, again);
  CHECK(out == again);
  // Other ranks draw other examples.
  ShardSampler other(n, nodes, 4, batch, 99);
  other.batch_indices(0, 0, again);
  CHECK(std::none_of(again.begin(), again.end(), [&](std::size_t i) { return shard.count(i); }));

  std::vector<std::size_t> wrong(batch + 1);
  CHECK_THROWS_AS(s.batch_indices(0, 0, wrong), ContractError);
  CHECK_THROWS_AS(s.batch_indices(0, iters, out), ContractError);
}

TEST_CASE("gather_batch copies rows and labels", "[tasks][shard]") {
  const Dataset d{4, 2, 10, {0, 1, 10, 11, 20, 21, 30, 31}, {5, 6, 7, 8}};
  const std::vector<std::size_t> idx = {3, 1};
  std::vector<float> x(4);
  std::vector<std::int32_t> y(2);
  gather_batch(d, idx, x, y);
  CHECK(x == std::vector<float>{30, 31, 10, 11});
  CHECK(y == std::vector<std::int32_t>{8, 6});
  const std::vector<std::size_t> bad = {4, 0};
  CHECK_THROWS_AS(gather_batch(d, bad, x, y), ContractError);
}

}  // namespace gradmesh::tasks
