// Ako eq. 3 (SoCC'16 sec. 3.2) in topo: p = ceil(gamma m (n - 1) / B), the same figures as
// sync/ako/partition_count.

#include "topo/partition_count.h"

#include <cmath>
#include <vector>

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

TEST_CASE("topo eq. 3 is clamped to 1..max_auto_partitions(m)", "[topo][eq3]") {
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

TEST_CASE(
    "per-link p: equal links reduce to eq. 3, a slower link gets smaller partitions in "
    "proportion",
    "[topo][eq3][links]") {
  const double gbit = 125e6;
  // Equal links (and links within the probe's spread, kEqualLinksRatio): eq. 3's p on every link.
  const PartitionChoice c = partitions_for(10, 1'000'000, 4, 12.5e6);  // eq. 3: 9.6 -> 10
  const std::vector<double> equal = {0, gbit, gbit, gbit};
  CHECK(link_partitions(c.eq3, c.partitions, equal, 128) ==
        std::vector<std::size_t>{0, 10, 10, 10});
  const std::vector<double> spread = {gbit, 0, 0.8 * gbit, 1.15 * gbit};
  CHECK(link_partitions(c.eq3, c.partitions, spread, 128) ==
        std::vector<std::size_t>{10, 0, 10, 10});

  // One link at half the rate: bytes per round (m / p_i) follow the rates within 10%.
  for (const double p_exact : {6.0, 9.6, 24.0, 50.0}) {
    const std::vector<double> rates = {0, gbit, gbit, 0.5 * gbit};
    const auto p =
        link_partitions(p_exact, static_cast<std::size_t>(std::ceil(p_exact)), rates, 128);
    INFO("p_exact " << p_exact << ": " << p[1] << ", " << p[2] << ", " << p[3]);
    REQUIRE(p[0] == 0);
    CHECK(p[1] == p[2]);
    const double bytes_ratio =
        static_cast<double>(p[1]) / static_cast<double>(p[3]);  // slow / fast
    CHECK(bytes_ratio == Approx(0.5).epsilon(0.1));
    // The same total bytes per round as eq. 3 at p_exact (within the rounding up).
    const double total = 2.0 / static_cast<double>(p[1]) + 1.0 / static_cast<double>(p[3]);
    CHECK(total <= 3.0 / p_exact + 1e-12);
    CHECK(total >= 3.0 / p_exact * 0.8);
  }
  // p_i = ceil(p_exact x mean / r_i): rates 1, 1, 1/2 -> mean 5/6 (10 and 20 exactly, not 11 and
  // 21 from the float error of 5/6).
  const auto p = link_partitions(12.0, 12, std::vector<double>{gbit, gbit, 0.5 * gbit}, 128);
  CHECK(p == std::vector<std::size_t>{10, 10, 20});
  // Clamped to [1, max_partitions].
  CHECK(link_partitions(100.0, 100, std::vector<double>{gbit, 0.25 * gbit}, 128) ==
        std::vector<std::size_t>{63, 128});
  CHECK(link_partitions(0.1, 1, std::vector<double>{gbit, 0.25 * gbit}, 128) ==
        std::vector<std::size_t>{1, 1});
  // One link: nothing to compare.
  CHECK(link_partitions(3.5, 4, std::vector<double>{0, 0.01 * gbit}, 128) ==
        std::vector<std::size_t>{0, 4});
  CHECK_THROWS_AS(link_partitions(-1, 1, equal, 128), gradmesh::ContractError);
  CHECK_THROWS_AS(link_partitions(1, 0, equal, 128), gradmesh::ContractError);
  CHECK_THROWS_AS(link_partitions(1, 1, equal, 0), gradmesh::ContractError);
  CHECK_THROWS_AS(link_partitions(1, 1, std::vector<double>{gbit, std::nan("")}, 128),
                  gradmesh::ContractError);
}
