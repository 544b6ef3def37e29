// Tests for sync/ako/staging_delta.cpp: the received update an Ako node folds in at an iteration
// boundary (Ako SoCC'16 Algorithm 1, line 13).

#include "sync/ako/staging_delta.h"

#include <cstddef>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"

using gradmesh::sync::ako::StagingDelta;

namespace {

constexpr std::size_t kBlock = StagingDelta::kBlock;

}  // namespace

TEST_CASE("a staged range is added once to the parameters, then the delta is zero",
          "[ako][staging]") {
  const std::size_t floats = 3 * kBlock + 5;  // a short last block
  StagingDelta delta(floats);
  std::vector<float> w(floats, 1.0f);
  CHECK(delta.apply_to(w) == 0);  // nothing staged: nothing visited

  // A range across the first block boundary, scaled by -lr (line 13).
  const std::vector<float> values(10, 2.0f);
  delta.add(kBlock - 4, values, -0.5f);
  delta.add(kBlock - 4, values, -0.5f);    // a second partition on the same range adds up
  CHECK(delta.apply_to(w) == 2 * kBlock);  // the two blocks it touched
  for (std::size_t i = 0; i < floats; ++i) {
    const bool staged = i >= kBlock - 4 && i < kBlock + 6;
    INFO("float " << i);
    REQUIRE(w[i] == (staged ? -1.0f : 1.0f));
  }
  CHECK(delta.apply_to(w) == 0);  // folded: cleared
  CHECK(w[kBlock] == -1.0f);

  // The last, short block.
  delta.add(floats - 2, std::vector<float>{4.0f, 8.0f}, 0.25f);
  CHECK(delta.apply_to(w) == 5);
  CHECK(w[floats - 2] == 2.0f);
  CHECK(w[floats - 1] == 3.0f);
}

TEST_CASE("a range outside the delta or parameters of another size are refused", "[ako][staging]") {
  StagingDelta delta(100);
  std::vector<float> w(100, 0.0f);
  CHECK_THROWS_AS(delta.add(95, std::vector<float>(6, 1.0f), 1.0f), gradmesh::ContractError);
  CHECK_THROWS_AS(delta.add(101, {}, 1.0f), gradmesh::ContractError);
  CHECK(delta.apply_to(w) == 0);  // nothing was added
  std::vector<float> short_w(99, 0.0f);
  CHECK_THROWS_AS(delta.apply_to(short_w), gradmesh::ContractError);
  CHECK_NOTHROW(delta.add(100, {}, 1.0f));  // an empty range at the end
}

TEST_CASE("partitions staged from several threads all arrive", "[ako][staging]") {
  // Four receivers stage 1.0 on every float, each in its own order of ranges; exact in floats.
  const std::size_t floats = 4 * kBlock;
  StagingDelta delta(floats);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&delta, t, floats] {
      const std::vector<float> ones(1000, 1.0f);
      for (std::size_t k = 0; k < floats / 1000; ++k) {
        const std::size_t range = (k + t * 17) % (floats / 1000);
        delta.add(range * 1000, ones, 1.0f);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<float> w(floats, 0.0f);
  (void)delta.apply_to(w);
  const std::size_t covered = floats / 1000 * 1000;
  for (std::size_t i = 0; i < covered; ++i) REQUIRE(w[i] == 4.0f);
  for (std::size_t i = covered; i < floats; ++i) REQUIRE(w[i] == 0.0f);
}
