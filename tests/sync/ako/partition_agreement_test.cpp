// Tests for sync/ako/partition_agreement.cpp: the nodes' agreement on Ako's p (SoCC'16 sec. 3.2,
// eq. 3), without a stage or a transport.

#include "sync/ako/partition_agreement.h"

#include <cmath>
#include <cstddef>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"

using gradmesh::sync::ako::PartitionAgreement;
using gradmesh::sync::ako::PartitionChoice;

namespace {

constexpr std::size_t kFloats = 1'000'000;                   // m = 4 MB
constexpr double kBytes = static_cast<double>(kFloats) * 4;  // m in bytes
constexpr double kB = 12.5e6;                                // B = 100 Mbit/s

const PartitionAgreement::Live kAllLive = [](std::size_t) { return true; };

}  // namespace

TEST_CASE("p is agreed from the mean gamma once every node's profile is in, plans in order",
          "[ako][agreement]") {
  PartitionAgreement a(0, 3, kFloats, true, kB, {});
  CHECK(a.plans_needed() == 2);
  CHECK(a.record(0, 0, 8.0, kBytes, kB).empty());
  CHECK(a.record(1, 0, 10.0, kBytes, kB).empty());
  CHECK_FALSE(a.try_agree(0, kAllLive));            // rank 2's gamma is missing
  CHECK(a.record(2, 1, 10.0, kBytes, kB).empty());  // plan 1 before plan 0: kept, not agreed
  CHECK_FALSE(a.try_agree(1, kAllLive));
  CHECK(a.record(2, 0, 12.0, kBytes, kB).empty());
  const std::optional<PartitionChoice> c = a.try_agree(0, kAllLive);
  REQUIRE(c);
  // Eq. 3: gamma 10 (the mean) x 4 MB x (3 - 1) / 12.5 MB/s = 6.4 -> 7.
  CHECK(c->gamma == Approx(10.0));
  CHECK(c->eq3 == Approx(6.4));
  CHECK(c->partitions == 7);
  CHECK_FALSE(a.try_agree(0, kAllLive));  // once per plan
  CHECK(a.agreed() == 0);                 // until the caller agrees
  const std::vector<std::size_t>& links = a.agree(0, c->partitions, c->eq3, kAllLive);
  CHECK(links == std::vector<std::size_t>{0, 7, 7});
  CHECK(a.agreed() == 1);
  CHECK(a.partitions(0) == 7);
  CHECK(a.link_partitions(0, 2) == 7);
  CHECK(a.choice(0).partitions == 7);
}

TEST_CASE("a failed peer's gamma is left out of the mean and its link gets no partitions",
          "[ako][agreement]") {
  PartitionAgreement a(1, 3, kFloats, true, kB, {});
  const PartitionAgreement::Live rank2_dead = [](std::size_t r) { return r != 2; };
  CHECK(a.record(0, 0, 5.0, kBytes, kB).empty());
  CHECK(a.record(1, 0, 15.0, kBytes, kB).empty());
  const std::optional<PartitionChoice> c = a.try_agree(0, rank2_dead);
  REQUIRE(c);
  CHECK(c->gamma == Approx(10.0));
  CHECK(c->nodes == 2);  // n in eq. 3: the live nodes
  CHECK(a.agree(0, c->partitions, c->eq3, rank2_dead) ==
        std::vector<std::size_t>{c->partitions, 0, 0});
}

TEST_CASE("a profile that breaks the agreement is refused and changes nothing",
          "[ako][agreement]") {
  PartitionAgreement a(0, 2, kFloats, true, kB, {});
  CHECK(a.record(1, 0, 10.0, kBytes, kB).empty());
  CHECK_THAT(a.record(1, 0, 11.0, kBytes, kB), Catch::Contains("a second gradient-rate profile"));
  CHECK_THAT(a.record(0, 0, 10.0, kBytes * 2, kB), Catch::Contains("m = 8000000 bytes"));
  CHECK_THAT(a.record(0, 0, 10.0, kBytes, kB / 2), Catch::Contains("B = 6250000 bytes/s"));
  CHECK_THAT(a.record(0, 0, NAN, kBytes, kB), Catch::Contains("a gradient rate of nan"));
  CHECK_THAT(a.record(0, 0, -1.0, kBytes, kB), Catch::Contains("a gradient rate of -1"));
  CHECK(a.record(0, 0, 10.0, kBytes, kB).empty());  // rank 0's slot is still free
  const std::optional<PartitionChoice> c = a.try_agree(0, kAllLive);
  REQUIRE(c);
  CHECK(c->gamma == Approx(10.0));  // rank 1's first profile stands
  CHECK_THROWS_AS(a.record(2, 0, 1.0, kBytes, kB), gradmesh::ContractError);  // no rank 2
}

TEST_CASE("links of measured, different speeds get partition counts by their rates",
          "[ako][agreement]") {
  // Rank 0's links: to rank 1 at 100 Mbit/s, to rank 2 at 25 Mbit/s (beyond kEqualLinksRatio).
  PartitionAgreement automatic(0, 3, kFloats, true, kB, {0.0, 12.5e6, 3.125e6});
  const std::vector<std::size_t> links = automatic.agree(0, 4, 4.0, kAllLive);
  // p_i = ceil(p_exact x mean / rate): mean 7.8125e6 -> 4 x 0.625 = 2.5 -> 3; 4 x 2.5 = 10.
  CHECK(links == std::vector<std::size_t>{0, 3, 10});
  // A configured p is every link's, whatever the probe measured.
  PartitionAgreement configured(0, 3, kFloats, false, kB, {0.0, 12.5e6, 3.125e6});
  CHECK(configured.plans_needed() == 1);
  CHECK_FALSE(configured.try_agree(0, kAllLive));  // nothing to agree by eq. 3
  CHECK(configured.agree(0, 4, 4.0, kAllLive) == std::vector<std::size_t>{0, 4, 4});
}

TEST_CASE("a rejoining node adopts its donor's plans and profiles nothing", "[ako][agreement]") {
  PartitionAgreement a(2, 3, kFloats, true, kB, {});
  a.adopt(3, 5);
  CHECK(a.record(0, 0, 10.0, kBytes, kB).empty());
  CHECK(a.record(1, 0, 10.0, kBytes, kB).empty());
  CHECK(a.record(2, 0, 10.0, kBytes, kB).empty());
  CHECK_FALSE(a.try_agree(0, kAllLive));  // decided by the donor
  (void)a.agree(0, 3, 3.0, kAllLive);
  (void)a.agree(1, 5, 5.0, kAllLive);
  CHECK(a.agreed() == 2);
  CHECK(a.partitions(0) == 3);
  CHECK(a.partitions(1) == 5);
  CHECK(a.choice(1).partitions == 5);
}

TEST_CASE("with a configured p the node's own gamma fills the summary's eq. 3 figure",
          "[ako][agreement]") {
  PartitionAgreement a(0, 2, kFloats, false, kB, {});
  a.set_local_gamma(5.0);
  CHECK(a.choice(0).gamma == 5.0);
  CHECK(a.choice(0).eq3 == Approx(5.0 * kBytes * 1 / kB));
  PartitionAgreement unknown_b(0, 2, kFloats, false, 0.0, {});
  unknown_b.set_local_gamma(5.0);
  CHECK(unknown_b.choice(0).eq3 == 0.0);
}
