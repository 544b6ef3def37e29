// Ako eq. 3 (SoCC'16 sec. 3.2) in topo: p = ceil(gamma m (n - 1) / B), the same figures as
// sync/ako/partition_count.

#include "topo/partition_count.h"

#include <catch2/catch.hpp>

#include "engine/error.h"

using namespace gradmesh::topo;

TEST_CASE("topo eq. 3 on explicit numbers", "[topo][eq3]") {
  // gamma 10 gradients/s, m = 1,000,000 floats = 4 MB, B = 100 Mbit/s = 12.5 MB/s.
  const double b = 12.5e6;
  CHECK(partitions_for(10, 1'000'000, 2, b).partitions == 4);   // 3.2
  CHECK(partitions_for(10, 1'000'000, 4, b).partitions == 10);  // 9.6
  CHECK(partitions_for(10, 1'000'000, 8, b).partitions == 23);  // 22.4
  const PartitionChoice c = partitions_for(10, 1'000'000, 4, b);
  CHECK(c.eq3 == Approx(9.6));
  CHECK(c.model_bytes == 4e6);
  CHECK(c.bandwidth == b);
  CHECK(c.nodes == 4);
  CHECK(c.predicted_send_rate() == Approx(12e6));                  // 10 x 4e6 x 3 / 10
  CHECK(partitions_for(10, 1'000'000, 4, 12e6).partitions == 10);  // exactly 10: not rounded up
  // The paper's 16-machine 1 Gbps cluster: 2.2 x 1e7 x 15 / 1.25e8 = 2.64 -> 3 (Fig. 12).
  CHECK(partitions_for(2.2, 2'500'000, 16, 1.25e8).partitions == 3);
}

TEST_CASE("topo eq. 3 is clamped to [1, max_auto_partitions(m)]", "[topo][eq3]") {
  CHECK(partitions_for(0, 1000, 4, 1e6).partitions == 1);   // no gradients yet
  CHECK(partitions_for(10, 1000, 1, 1e6).partitions == 1);  // a single node
  CHECK(partitions_for(1e6, 1000, 4, 1e3).partitions == kMaxAutoPartitions);
  CHECK(partitions_for(1e6, 5, 4, 1e3).partitions == 5);  // never more than m floats
  CHECK(max_auto_partitions(269'322) == kMaxAutoPartitions);
  CHECK(max_auto_partitions(20'037'642) == 13);  // 80 MB a copy, 1 GiB of ring
  const PartitionChoice c = partitions_for(10, 20'037'642, 4, 12.5e6);
  CHECK(c.eq3 == Approx(192.36).epsilon(1e-3));
  CHECK(c.partitions == 13);
  CHECK(c.predicted_send_rate() > 12.5e6);
}

TEST_CASE("topo eq. 3 rejects bad inputs, printing the value", "[topo][eq3]") {
  CHECK_THROWS_AS(partitions_for(1, 10, 2, 0), gradmesh::ContractError);
  CHECK_THROWS_WITH(partitions_for(1, 10, 2, -3), Catch::Contains("-3"));
  CHECK_THROWS_WITH(partitions_for(-1, 10, 2, 1e6), Catch::Contains("gamma"));
  CHECK_THROWS_WITH(partitions_for(1, 0, 2, 1e6), Catch::Contains("= 0"));
  CHECK_THROWS_WITH(partitions_for(1, 10, 0, 1e6), Catch::Contains("nodes n = 0"));
}
