// The hand-off from Ako's compute tasks to its network tasks (Ako SoCC'16 sec. 4.2, Fig. 7): one
// gradient per slot while the network keeps up, accumulation into the newest unclaimed slot only
// when it falls behind, and every gradient counted exactly once.

#include "sync/ako/handoff_ring.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"

using gradmesh::sync::ako::HandoffRing;

namespace {

std::vector<float> copy_of(std::span<const float> s) { return {s.begin(), s.end()}; }

std::vector<float> sum_of(std::initializer_list<std::vector<float>> gradients) {
  std::vector<float> sum(gradients.begin()->size(), 0.0f);
  for (const auto& g : gradients)
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
  return sum;
}

}  // namespace

TEST_CASE("a network that keeps up gets one gradient per slot, oldest first", "[ako][handoff]") {
  HandoffRing ring(3, 4);
  CHECK(ring.floats() == 3);
  CHECK(ring.slots() == 4);
  CHECK(ring.filled() == 0);
  CHECK(ring.pending_gradients() == 0);
  CHECK_FALSE(ring.claim().has_value());

  const std::vector<float> a = {1, 2, 3};
  const std::vector<float> b = {4, 5, 6};
  const std::vector<float> c = {7, 8, 9};
  const std::vector<float> d = {-1, -2, -3};

  ring.put(a);
  CHECK(ring.filled() == 1);
  CHECK(ring.pending_gradients() == 1);
  auto got = ring.claim();
  REQUIRE(got.has_value());
  CHECK(got->count == 1);
  CHECK(copy_of(got->gradient) == a);
  CHECK(ring.filled() == 0);
  CHECK(ring.pending_gradients() == 0);
  ring.release();

  // Three gradients, none claimed in between: three slots, handed out in order.
  ring.put(b);
  ring.put(c);
  ring.put(d);
  CHECK(ring.filled() == 3);
  CHECK(ring.pending_gradients() == 3);
  for (const auto* expected : {&b, &c, &d}) {
    got = ring.claim();
    REQUIRE(got.has_value());
    CHECK(got->count == 1);
    CHECK(copy_of(got->gradient) == *expected);
    ring.release();
  }
  CHECK(ring.filled() == 0);
  CHECK(ring.pending_gradients() == 0);
  CHECK_FALSE(ring.claim().has_value());

  // Wrapping around the ring: slots are reused in FIFO order (the ring's head is now at slot 0).
  for (int round = 0; round < 10; ++round) {
    const std::vector<float> g = {static_cast<float>(round), 0, static_cast<float>(-round)};
    ring.put(g);
    got = ring.claim();
    REQUIRE(got.has_value());
    CHECK(got->count == 1);
    CHECK(copy_of(got->gradient) == g);
    ring.release();
  }
}

TEST_CASE("a full ring adds into the newest unclaimed slot, never into the claimed one",
          "[ako][handoff]") {
  SECTION("with a slot claimed") {
    HandoffRing ring(2, 3);
    const std::vector<float> g1 = {1, 10};
    const std::vector<float> g2 = {2, 20};
    const std::vector<float> g3 = {4, 40};
    const std::vector<float> g4 = {8, 80};
    const std::vector<float> g5 = {16, 160};
    ring.put(g1);
    auto claimed = ring.claim();
    REQUIRE(claimed.has_value());
    ring.put(g2);
    ring.put(g3);  // every slot taken now
    CHECK(ring.filled() == 2);
    CHECK(ring.pending_gradients() == 2);
    ring.put(g4);
    ring.put(g5);
    CHECK(ring.filled() == 2);
    CHECK(ring.pending_gradients() == 4);
    // The claimed span is untouched.
    CHECK(claimed->count == 1);
    CHECK(copy_of(claimed->gradient) == g1);
    ring.release();

    auto got = ring.claim();
    REQUIRE(got.has_value());
    CHECK(got->count == 1);
    CHECK(copy_of(got->gradient) == g2);
    ring.release();
    got = ring.claim();
    REQUIRE(got.has_value());
    CHECK(got->count == 3);
    CHECK(copy_of(got->gradient) == sum_of({g3, g4, g5}));
    ring.release();
    CHECK_FALSE(ring.claim().has_value());
  }

  SECTION("with nothing claimed, then the oldest claimed while full") {
    HandoffRing ring(1, 2);
    ring.put(std::vector<float>{1});
    ring.put(std::vector<float>{2});
    ring.put(std::vector<float>{4});  // full: into the newest slot
    CHECK(ring.filled() == 2);
    CHECK(ring.pending_gradients() == 3);
    auto oldest = ring.claim();
    REQUIRE(oldest.has_value());
    CHECK(oldest->count == 1);
    CHECK(oldest->gradient[0] == 1.0f);
    CHECK(ring.filled() == 1);
    CHECK(ring.pending_gradients() == 2);
    ring.put(std::vector<float>{8});  // still full (the claimed slot is not free)
    ring.put(std::vector<float>{16});
    CHECK(oldest->gradient[0] == 1.0f);
    CHECK(ring.pending_gradients() == 4);
    ring.release();
    // The freed slot takes the next gradient on its own.
    ring.put(std::vector<float>{32});
    CHECK(ring.filled() == 2);
    CHECK(ring.pending_gradients() == 5);
    auto got = ring.claim();
    REQUIRE(got.has_value());
    CHECK(got->count == 4);
    CHECK(got->gradient[0] == 2.0f + 4.0f + 8.0f + 16.0f);
    ring.release();
    got = ring.claim();
    REQUIRE(got.has_value());
    CHECK(got->count == 1);
    CHECK(got->gradient[0] == 32.0f);
    ring.release();
  }
}

TEST_CASE("HandoffRing contract errors", "[ako][handoff]") {
  CHECK_THROWS_AS(HandoffRing(0, 2), gradmesh::ContractError);
  CHECK_THROWS_AS(HandoffRing(3, 1), gradmesh::ContractError);
  CHECK_THROWS_AS(HandoffRing(3, 0), gradmesh::ContractError);
  CHECK_NOTHROW(HandoffRing(1, 2));

  HandoffRing ring(3, 2);
  CHECK_THROWS_AS(ring.put(std::vector<float>(2)), gradmesh::ContractError);
  CHECK_THROWS_AS(ring.put(std::vector<float>(4)), gradmesh::ContractError);
  CHECK_THROWS_AS(ring.put(std::vector<float>()), gradmesh::ContractError);
  CHECK(ring.filled() == 0);
  CHECK(ring.pending_gradients() == 0);

  CHECK_THROWS_AS(ring.release(), gradmesh::ContractError);  // nothing claimed
  CHECK_FALSE(ring.claim().has_value());
  CHECK_THROWS_AS(ring.release(), gradmesh::ContractError);  // an empty claim() claims nothing

  ring.put(std::vector<float>{1, 2, 3});
  ring.put(std::vector<float>{4, 5, 6});
  REQUIRE(ring.claim().has_value());
  CHECK_THROWS_AS(ring.claim(), gradmesh::ContractError);  // one slot claimed at a time
  ring.release();
  CHECK_THROWS_AS(ring.release(), gradmesh::ContractError);  // released twice
  // The ring still works after the errors.
  auto got = ring.claim();
  REQUIRE(got.has_value());
  CHECK(copy_of(got->gradient) == std::vector<float>{4, 5, 6});
  ring.release();
}

TEST_CASE("the counts of the slots claimed sum to the gradients put, and their sums to the sum",
          "[ako][handoff]") {
  // A random single-threaded interleaving of put / claim / release, checked against a plain model
  // of the ring (a deque of (sum, count): one per slot, the newest added into when full).
  constexpr std::size_t m = 5;
  unsigned seed = 7;
  for (std::size_t slots : {2, 3, 5}) {
    for (double put_weight : {0.3, 0.5, 0.8}) {
      INFO("slots = " << slots << ", P(put) = " << put_weight << ", seed = " << seed);
      std::mt19937 rng(seed++);
      std::uniform_int_distribution<int> value(-8, 8);
      std::bernoulli_distribution do_put(put_weight);
      HandoffRing ring(m, slots);
      struct Slot {
        std::vector<float> sum;
        std::uint64_t count;
      };
      std::deque<Slot> model;  // front: the claimed slot when `claimed`
      bool claimed = false;
      std::vector<float> total_put(m, 0.0f), total_claimed(m, 0.0f);
      std::uint64_t puts = 0, counted = 0;
      std::vector<float> g(m);
      for (int step = 0; step < 2000; ++step) {
        if (do_put(rng)) {
          for (float& x : g) x = static_cast<float>(value(rng));  // integers: sums are exact
          ring.put(g);
          ++puts;
          for (std::size_t i = 0; i < m; ++i) total_put[i] += g[i];
          if (model.size() < slots) {
            model.push_back({g, 1});
          } else {
            for (std::size_t i = 0; i < m; ++i) model.back().sum[i] += g[i];
            ++model.back().count;
          }
        } else if (!claimed) {
          auto got = ring.claim();
          REQUIRE(got.has_value() == !model.empty());
          if (got) {
            claimed = true;
            REQUIRE(got->count == model.front().count);
            REQUIRE(copy_of(got->gradient) == model.front().sum);
            counted += got->count;
            for (std::size_t i = 0; i < m; ++i) total_claimed[i] += got->gradient[i];
          }
        } else {
          ring.release();
          claimed = false;
          model.pop_front();
        }
        const std::size_t filled = model.size() - (claimed ? 1 : 0);
        REQUIRE(ring.filled() == filled);
        REQUIRE(ring.pending_gradients() == puts - counted);
      }
      // Drain.
      if (claimed) ring.release();
      while (auto got = ring.claim()) {
        counted += got->count;
        for (std::size_t i = 0; i < m; ++i) total_claimed[i] += got->gradient[i];
        ring.release();
      }
      CHECK(ring.filled() == 0);
      CHECK(ring.pending_gradients() == 0);
      CHECK(counted == puts);
      CHECK(total_claimed == total_put);
    }
  }
}

TEST_CASE("a producer and a consumer thread: every gradient arrives, counted once",
          "[ako][handoff][threads]") {
  constexpr std::size_t m = 7;
  constexpr std::uint64_t n = 2000;
  for (std::size_t slots : {2, 4}) {
    INFO("slots = " << slots);
    HandoffRing ring(m, slots);
    auto gradient = [](std::uint64_t t, std::size_t i) {
      return static_cast<float>(static_cast<int>((t * 7 + i * 3) % 17) - 8);
    };
    std::vector<float> expected(m, 0.0f);
    for (std::uint64_t t = 0; t < n; ++t)
      for (std::size_t i = 0; i < m; ++i) expected[i] += gradient(t, i);

    std::thread producer([&] {
      std::vector<float> g(m);
      for (std::uint64_t t = 0; t < n; ++t) {
        for (std::size_t i = 0; i < m; ++i) g[i] = gradient(t, i);
        ring.put(g);
        if (t % 64 == 0) std::this_thread::yield();
      }
    });

    std::vector<float> received(m, 0.0f);
    std::uint64_t counted = 0;
    std::uint64_t claims = 0;
    bool unchanged = true;  // a claimed span never changes under the consumer
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (counted < n && std::chrono::steady_clock::now() < deadline) {
      auto got = ring.claim();
      if (!got) {
        std::this_thread::yield();
        continue;
      }
      ++claims;
      const std::vector<float> before = copy_of(got->gradient);
      for (std::size_t i = 0; i < m; ++i) received[i] += got->gradient[i];
      counted += got->count;
      if (claims % 16 == 0) std::this_thread::yield();  // let the producer fill the ring
      if (copy_of(got->gradient) != before) unchanged = false;
      ring.release();
    }
    producer.join();
    CHECK(counted == n);
    CHECK(received == expected);
    CHECK(unchanged);
    CHECK(claims <= n);
    CHECK_FALSE(ring.claim().has_value());
    CHECK(ring.pending_gradients() == 0);
  }
}
