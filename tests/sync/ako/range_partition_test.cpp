#include "sync/ako/range_partition.h"

#include <catch2/catch.hpp>

#include "engine/error.h"

using gradmesh::sync::ako::Range;
using gradmesh::sync::ako::RangePartition;

TEST_CASE("ranges are contiguous, cover 0..m and differ in size by at most one",
          "[ako][partition]") {
  for (std::size_t m : {1u, 2u, 7u, 10u, 100u, 269322u}) {
    for (std::size_t p : {1u, 2u, 3u, 4u, 7u, 10u, 64u}) {
      if (p > m) continue;
      INFO("m = " << m << ", p = " << p);
      const RangePartition part(m, p);
      std::size_t next = 0, smallest = m, largest = 0;
      for (std::size_t k = 0; k < p; ++k) {
        const Range r = part.range(k);
        CHECK(r.offset == next);
        CHECK(r.size >= 1);
        next = r.offset + r.size;
        smallest = std::min(smallest, r.size);
        largest = std::max(largest, r.size);
      }
      CHECK(next == m);
      CHECK(largest - smallest <= 1);
      CHECK(largest == part.max_range_floats());
    }
  }
}

TEST_CASE("peer i receives range (i + t) mod p and sees every range in p rounds",
          "[ako][partition]") {
  const RangePartition part(100, 4);
  CHECK(part.range_for(0, 0) == 0);
  CHECK(part.range_for(1, 0) == 1);
  CHECK(part.range_for(1, 3) == 0);
  CHECK(part.range_for(6, 7) == 1);
  for (std::size_t peer = 0; peer < 6; ++peer) {
    for (std::uint64_t start = 0; start < 5; ++start) {
      std::vector<int> seen(4, 0);
      for (std::uint64_t t = start; t < start + 4; ++t) ++seen[part.range_for(peer, t)];
      CHECK(seen == std::vector<int>(4, 1));
    }
  }
}

TEST_CASE("a partition count outside 1..m is a config error naming the key", "[ako][partition]") {
  CHECK_THROWS_WITH(RangePartition(10, 11), Catch::Contains("sync.ako.partitions = 11"));
  CHECK_THROWS_AS(RangePartition(10, 0), gradmesh::ConfigError);
  CHECK_THROWS_AS(RangePartition(0, 1), gradmesh::ContractError);
  CHECK_THROWS_AS(RangePartition(10, 2).range(2), gradmesh::ContractError);
}
