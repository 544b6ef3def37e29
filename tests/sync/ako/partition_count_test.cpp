// Ako eq. 3 (SoCC'16 sec. 3.2): p = ceil(gamma m (n - 1) / B).

#include "sync/ako/partition_count.h"

#include <catch2/catch.hpp>

#include "engine/error.h"

using gradmesh::sync::AkoOptions;
using gradmesh::sync::ako::eq3_bandwidth;
using gradmesh::sync::ako::kMaxAutoPartitions;
using gradmesh::sync::ako::kMaxRingBytes;
using gradmesh::sync::ako::max_auto_partitions;
using gradmesh::sync::ako::partitions_for;

TEST_CASE("eq. 3 on explicit numbers", "[ako][eq3]") {
  // gamma 10 gradients/s, m = 1,000,000 floats = 4 MB, B = 100 Mbit/s = 12.5 MB/s.
  const double b = 12.5e6;
  CHECK(partitions_for(10, 1'000'000, 2, b).partitions == 4);   // 3.2
  CHECK(partitions_for(10, 1'000'000, 4, b).partitions == 10);  // 9.6
  CHECK(partitions_for(10, 1'000'000, 8, b).partitions == 23);  // 22.4
  const auto c = partitions_for(10, 1'000'000, 4, b);
  CHECK(c.eq3 == Approx(9.6));
  CHECK(c.model_bytes == 4e6);
  CHECK(c.predicted_send_rate() == Approx(12e6));  // 10 x 4e6 x 3 / 10
  // An exact multiple is not rounded up: 10 x 4e6 x 3 / 12e6 = 10.
  CHECK(partitions_for(10, 1'000'000, 4, 12e6).partitions == 10);
}

TEST_CASE("eq. 3 on the paper's 16-machine 1 Gbps cluster picks p = 3 (Fig. 12)", "[ako][eq3]") {
  // A model of m = 2.5 M floats (10 MB) at gamma = 2.2 gradients/s per worker: 2.2 x 1e7 x 15 /
  // 1.25e8 = 2.64 -> 3, the partition count the cost model predicted and Fig. 12(a) found best;
  // at p = 2 the predicted usage (165 MB/s) exceeds the 1 Gbps link (Fig. 12(b)).
  const auto c = partitions_for(2.2, 2'500'000, 16, 1.25e8);
  CHECK(c.partitions == 3);
  CHECK(c.predicted_send_rate() <= 1.25e8);
  CHECK(2.2 * 1e7 * 15 / 2 > 1.25e8);
}

TEST_CASE("at fixed B, p grows with n so that gamma m (n - 1) / p <= B", "[ako][eq3]") {
  const double gamma = 40, b = 12.5e6;
  const std::size_t m = 269'322;  // the demo MLP 784-256-256-10
  std::size_t previous = 0;
  for (std::size_t n = 2; n <= 16; ++n) {
    const auto c = partitions_for(gamma, m, n, b);
    INFO("n = " << n << ", p = " << c.partitions);
    CHECK(c.partitions >= previous);
    CHECK(c.predicted_send_rate() <= b);
    // And p is the smallest such count: one fewer partition would exceed B.
    if (c.partitions > 1) CHECK(gamma * c.model_bytes * (n - 1) / (c.partitions - 1) > b);
    previous = c.partitions;
  }
  CHECK(previous > 1);
}

TEST_CASE("p is clamped to 1..min(128, m)", "[ako][eq3]") {
  CHECK(partitions_for(0, 1000, 4, 1e6).partitions == 1);   // no gradients yet: 1
  CHECK(partitions_for(10, 1000, 1, 1e6).partitions == 1);  // a single node
  CHECK(partitions_for(1e6, 1000, 4, 1e3).partitions == kMaxAutoPartitions);
  CHECK(partitions_for(1e6, 5, 4, 1e3).partitions == 5);  // never more than m floats
  CHECK_THROWS_AS(partitions_for(1, 10, 2, 0), gradmesh::ContractError);
}

TEST_CASE("auto p keeps the accumulation ring (p copies of the model) within 1 GiB", "[ako][eq3]") {
  CHECK(max_auto_partitions(269'322) == kMaxAutoPartitions);  // the demo MLP: 1 MB a copy
  // 784-4096-4096-10: 20,037,642 floats, 80 MB a copy -> at most 13 copies in 1 GiB.
  const std::size_t large = 20'037'642;
  CHECK(max_auto_partitions(large) == 13);
  const auto c = partitions_for(10, large, 4, 12.5e6);  // eq. 3 alone: 192.4
  CHECK(c.eq3 == Approx(192.36).epsilon(1e-3));
  CHECK(c.partitions == 13);
  CHECK(c.partitions * large * sizeof(float) <= kMaxRingBytes);
  CHECK(c.predicted_send_rate() > 12.5e6);  // the network is the bottleneck: AkoStage warns
  CHECK(max_auto_partitions(std::size_t{1} << 30) == 1);  // 4 GiB a copy: still one partition
}

TEST_CASE("B is net.max_send_rate, else sync.ako.bandwidth, else a config error", "[ako][eq3]") {
  AkoOptions o;
  CHECK_THROWS_AS(eq3_bandwidth(o), gradmesh::ConfigError);
  CHECK_THROWS_WITH(eq3_bandwidth(o), Catch::Contains("sync.ako.partitions") &&
                                          Catch::Contains("sync.ako.bandwidth") &&
                                          Catch::Contains("net.max_send_rate"));
  o.bandwidth = 1e9;
  CHECK(eq3_bandwidth(o) == 1e9);
  o.max_send_rate = 12.5e6;
  CHECK(eq3_bandwidth(o) == 12.5e6);
}
