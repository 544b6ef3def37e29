#include "tasks/random.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

namespace gradmesh::tasks {

TEST_CASE("SplitMix64 matches the reference sequence", "[tasks][random]") {
  // First outputs of the reference splitmix64.c with state 0.
  SplitMix64 rng(0);
  CHECK(rng.next() == 0xE220A8397B1DCDAFULL);
  CHECK(rng.next() == 0x6E789E6AA1B965F4ULL);
}

TEST_CASE("SplitMix64 ranges", "[tasks][random]") {
  SplitMix64 rng(42);
  for (int i = 0; i < 10000; ++i) {
    const float f = rng.next_float();
    REQUIRE(f >= 0.0f);
    REQUIRE(f < 1.0f);
    REQUIRE(rng.next_below(7) < 7);
  }
  CHECK(rng.next_below(1) == 0);
}

TEST_CASE("derive_seed separates streams", "[tasks][random]") {
  CHECK(derive_seed(1, 0) != derive_seed(1, 1));
  CHECK(derive_seed(1, 0) != derive_seed(2, 0));
  CHECK(derive_seed(7, 3) == derive_seed(7, 3));
}

TEST_CASE("fisher_yates_shuffle permutes deterministically", "[tasks][random]") {
  std::vector<int> a(100);
  std::iota(a.begin(), a.end(), 0);
  std::vector<int> b = a;
  SplitMix64 r1(9), r2(9);
  fisher_yates_shuffle(std::span<int>(a), r1);
  fisher_yates_shuffle(std::span<int>(b), r2);
  CHECK(a == b);
  std::vector<int> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  CHECK(sorted == identity);
  CHECK(a != identity);
}

}  // namespace gradmesh::tasks
