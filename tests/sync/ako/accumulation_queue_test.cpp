// The exactly-once identity of partial gradient exchange (Ako SoCC'16 sec. 3.1, Fig. 6), with a
// fake transport: n nodes' accumulation queues and partitions driven directly, every "send"
// recorded per (receiver, sender, range).

#include "sync/ako/accumulation_queue.h"

#include <random>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "sync/ako/range_partition.h"

using gradmesh::sync::ako::AccumulationQueue;
using gradmesh::sync::ako::Range;
using gradmesh::sync::ako::RangePartition;

namespace {

/// One simulated node: its queue, its gradients' running prefix sums, and its round counter.
struct Node {
  Node(std::size_t m, std::size_t p) : queue(m, p), prefix(1, std::vector<float>(m, 0.0f)) {}
  AccumulationQueue queue;
  std::vector<std::vector<float>> prefix;  // prefix[t] = g_1 + ... + g_t
  std::uint64_t rounds = 0;
};

/// Per receiver i, sender j, range k: the sum of the copies received and the round tag (t) of the
/// last copy.
struct Received {
  std::vector<float> sum;
  std::uint64_t last_t = 0;
};

void run_exchange(std::size_t n, std::size_t p, std::size_t m, bool coalesce, unsigned seed) {
  INFO("n = " << n << ", p = " << p << ", m = " << m << (coalesce ? ", coalescing rounds" : ""));
  const RangePartition part(m, p);
  std::vector<Node> nodes;
  for (std::size_t j = 0; j < n; ++j) nodes.emplace_back(m, p);
  // received[i][j][k]
  std::vector<std::vector<std::vector<Received>>> received(
      n, std::vector<std::vector<Received>>(n, std::vector<Received>(p)));
  for (auto& by_sender : received)
    for (auto& by_range : by_sender)
      for (std::size_t k = 0; k < p; ++k) by_range[k].sum.assign(part.range(k).size, 0.0f);

  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> value(-8, 8);
  std::uniform_int_distribution<int> burst(1, 3);
  std::vector<float> g(m);
  const std::size_t steps = 3 * p + 11;
  for (std::size_t step = 0; step < steps; ++step) {
    for (std::size_t j = 0; j < n; ++j) {
      Node& node = nodes[j];
      // Gradients produced before this node's next round (more than one: the network was behind).
      const int produced = coalesce ? burst(rng) : 1;
      for (int b = 0; b < produced; ++b) {
        for (float& x : g) x = static_cast<float>(value(rng));  // integers: sums are exact
        node.queue.add(g);
        std::vector<float> next = node.prefix.back();
        for (std::size_t i = 0; i < m; ++i) next[i] += g[i];
        node.prefix.push_back(std::move(next));
      }
      REQUIRE(node.queue.pending() == static_cast<std::size_t>(produced));
      // Send the round: tag t = gradients folded, rotation = rounds sent so far + 1.
      const std::uint64_t t = node.prefix.size() - 1;
      const std::uint64_t rotation = ++node.rounds;
      const auto acc = node.queue.accumulated();
      for (std::size_t i = 0; i < n; ++i) {
        if (i == j) continue;
        const std::size_t k = part.range_for(i, rotation);
        const Range r = part.range(k);
        Received& rec = received[i][j][k];
        for (std::size_t x = 0; x < r.size; ++x) rec.sum[x] += acc[r.offset + x];
        rec.last_t = t;
      }
      node.queue.advance();
      CHECK(node.queue.round() == node.rounds);
    }
    // The identity, after every step: copies of range k from j sum to range k of g_1..g_t.
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        if (i == j) continue;
        for (std::size_t k = 0; k < p; ++k) {
          const Received& rec = received[i][j][k];
          const Range r = part.range(k);
          const auto& expected = nodes[j].prefix[rec.last_t];
          for (std::size_t x = 0; x < r.size; ++x) {
            if (rec.sum[x] != expected[r.offset + x]) {
              FAIL("receiver " << i << ", sender " << j << ", range " << k << ", float " << x
                               << ": received " << rec.sum[x] << ", expected "
                               << expected[r.offset + x] << " (t = " << rec.last_t << ")");
            }
          }
        }
      }
    }
  }
  // Every range has reached every peer at least once after p rounds.
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t k = 0; i != j && k < p; ++k) CHECK(received[i][j][k].last_t > 0);
}

}  // namespace

TEST_CASE("g*_t = g*_(t-1) + g_t - g_(t-p): the last p gradients", "[ako][accumulation]") {
  AccumulationQueue q(2, 3);
  const std::vector<std::vector<float>> g = {{1, 10}, {2, 20}, {4, 40}, {8, 80}, {16, 160}};
  std::vector<std::vector<float>> acc;
  for (const auto& x : g) {
    q.add(x);
    acc.emplace_back(q.accumulated().begin(), q.accumulated().end());
    q.advance();
  }
  CHECK(acc[0] == std::vector<float>{1, 10});
  CHECK(acc[1] == std::vector<float>{3, 30});
  CHECK(acc[2] == std::vector<float>{7, 70});
  CHECK(acc[3] == std::vector<float>{14, 140});  // g_2 + g_3 + g_4
  CHECK(acc[4] == std::vector<float>{28, 280});  // g_3 + g_4 + g_5
  CHECK_THROWS_AS(q.add(std::vector<float>(3)), gradmesh::ContractError);
}

TEST_CASE("p = 1 sends each gradient once, alone", "[ako][accumulation]") {
  AccumulationQueue q(1, 1);
  for (float x : {3.0f, 5.0f, 7.0f}) {
    q.add(std::vector<float>{x});
    CHECK(q.accumulated()[0] == x);
    q.advance();
  }
}

TEST_CASE("exactly once: the copies of range k a peer receives sum to range k of g_1..g_t",
          "[ako][accumulation][exactly-once]") {
  // p = 1, p < n, p = n, p = n - 1, p > n; one gradient per round (the paper) and several.
  const std::vector<std::pair<std::size_t, std::size_t>> cases = {
      {2, 1}, {4, 1}, {4, 2}, {3, 3}, {5, 4}, {2, 5}, {3, 7}, {6, 4}};
  unsigned seed = 1;
  for (const auto& [n, p] : cases) {
    for (bool coalesce : {false, true}) run_exchange(n, p, 23, coalesce, seed++);
  }
}
