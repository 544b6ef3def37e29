// The exactly-once identity of partial gradient exchange (Ako SoCC'16 sec. 3.1, Fig. 6), with a
// fake transport: n nodes' accumulation queues and partitions driven directly, every "send"
// recorded per (receiver, sender, range). Then undelivered(): the identity completed early, at the
// end of a job or when p changes mid-job.

#include "sync/ako/accumulation_queue.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "sync/ako/range_partition.h"

using gradmesh::sync::ako::AccumulationQueue;
using gradmesh::sync::ako::Range;
using gradmesh::sync::ako::RangePartition;
using gradmesh::sync::ako::undelivered;

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
  const std::vector<std::pair<std::size_t, std::size_t>> cases = {{2, 1}, {4, 1}, {4, 2}, {3, 3},
                                                                  {5, 4}, {2, 5}, {3, 7}, {6, 4}};
  unsigned seed = 1;
  for (const auto& [n, p] : cases) {
    for (bool coalesce : {false, true}) run_exchange(n, p, 23, coalesce, seed++);
  }
}

namespace {

/// One simulated sender for undelivered(): its queue and the sum of every gradient it added.
struct Sender {
  Sender(std::size_t m, std::size_t p) : queue(m, p), total(m, 0.0f) {}
  AccumulationQueue queue;
  std::vector<float> total;  // g_1 + ... + g_T
};

/// received[i][j]: what receiver i holds from sender j, every range at its offset (m floats).
using Inbox = std::vector<std::vector<std::vector<float>>>;

Inbox empty_inbox(std::size_t n, std::size_t m) {
  return Inbox(n, std::vector<std::vector<float>>(n, std::vector<float>(m, 0.0f)));
}

/// Random integer-valued gradients (sums are exact), several per round when coalescing (and
/// sometimes none: a round with nothing new).
class GradientSource {
 public:
  GradientSource(std::size_t m, unsigned seed) : g_(m), rng_(seed) {}
  std::size_t per_round(bool coalesce) { return coalesce ? burst_(rng_) : 1; }
  std::size_t upto(std::size_t most) {
    return std::uniform_int_distribution<std::size_t>(0, most)(rng_);
  }
  void add_to(Sender& s) {
    for (float& x : g_) x = static_cast<float>(value_(rng_));
    s.queue.add(g_);
    for (std::size_t i = 0; i < g_.size(); ++i) s.total[i] += g_[i];
  }

 private:
  std::vector<float> g_;
  std::mt19937 rng_;
  std::uniform_int_distribution<int> value_{-8, 8};
  std::uniform_int_distribution<std::size_t> burst_{0, 3};
};

/// Sender j runs `rounds` rounds: round r (= queue.round()) sends peer i range
/// part.range_for(i, r) of g*_r. Then `pending` gradients are added to the open round, unsent.
void run_rounds(Sender& s, std::size_t j, const RangePartition& part, std::size_t rounds,
                std::size_t pending, bool coalesce, GradientSource& source, Inbox& received) {
  const std::size_t n = received.size();
  for (std::size_t round = 0; round < rounds; ++round) {
    const std::size_t produced = source.per_round(coalesce);
    for (std::size_t b = 0; b < produced; ++b) source.add_to(s);
    const auto acc = s.queue.accumulated();
    for (std::size_t i = 0; i < n; ++i) {
      if (i == j) continue;
      const Range r = part.range(part.range_for(i, s.queue.round()));
      for (std::size_t x = 0; x < r.size; ++x) received[i][j][r.offset + x] += acc[r.offset + x];
    }
    s.queue.advance();
  }
  for (std::size_t b = 0; b < pending; ++b) source.add_to(s);
  REQUIRE(s.queue.pending() == pending);
}

/// run_rounds() with a partition per peer (links of different speeds): round r sends peer i range
/// parts[i].range_for(i, r) of the sum of its last parts[i].partitions() round gradients
/// (window_sum(), as AkoStage::send_round does).
void run_link_rounds(Sender& s, std::size_t j, const std::vector<RangePartition>& parts,
                     std::size_t rounds, std::size_t pending, bool coalesce, GradientSource& source,
                     Inbox& received) {
  const std::size_t n = received.size();
  std::vector<float> out;
  for (std::size_t round = 0; round < rounds; ++round) {
    const std::size_t produced = source.per_round(coalesce);
    for (std::size_t b = 0; b < produced; ++b) source.add_to(s);
    for (std::size_t i = 0; i < n; ++i) {
      if (i == j) continue;
      const Range r = parts[i].range(parts[i].range_for(i, s.queue.round()));
      out.assign(r.size, 12345.0f);  // overwritten, not added to
      s.queue.window_sum(r, parts[i].partitions(), out);
      for (std::size_t x = 0; x < r.size; ++x) received[i][j][r.offset + x] += out[x];
    }
    s.queue.advance();
  }
  for (std::size_t b = 0; b < pending; ++b) source.add_to(s);
}

/// Sender j sends undelivered() to every peer, once.
void send_undelivered(const Sender& s, std::size_t j, const RangePartition& part, Inbox& received) {
  std::vector<float> out(part.floats());
  for (std::size_t i = 0; i < received.size(); ++i) {
    if (i == j) continue;
    std::fill(out.begin(), out.end(), 12345.0f);  // overwritten, not added to
    undelivered(s.queue, part, i, out);
    for (std::size_t x = 0; x < out.size(); ++x) received[i][j][x] += out[x];
  }
}

/// Every receiver holds exactly every other sender's g_1 + ... + g_T, every float.
void check_all_delivered(const std::vector<Sender>& senders, const Inbox& received) {
  const std::size_t n = senders.size();
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      const auto& got = received[i][j];
      const auto& expected = senders[j].total;
      for (std::size_t x = 0; x < expected.size(); ++x) {
        if (got[x] != expected[x]) {
          FAIL("receiver " << i << ", sender " << j << " (round " << senders[j].queue.round()
                           << "), float " << x << ": holds " << got[x] << ", expected "
                           << expected[x]);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("undelivered is, per range, the rounds sent since the peer last received it",
          "[ako][accumulation][undelivered]") {
  // m = 3, p = 3: one float per range. Peer 1 receives range (1 + r) mod 3 in round r.
  AccumulationQueue q(3, 3);
  const RangePartition part(3, 3);
  std::vector<float> out(3);
  undelivered(q, part, 1, out);
  CHECK(out == std::vector<float>{0, 0, 0});
  q.add(std::vector<float>{1, 2, 4});  // round 0 sends peer 1 range 1
  q.advance();
  q.add(std::vector<float>{10, 20, 40});  // round 1 sends peer 1 range 2
  q.advance();
  q.add(std::vector<float>{100, 200, 400});  // round 2: open, not sent
  undelivered(q, part, 1, out);
  // Range 0 never sent: G_0 + G_1 + G_2; range 1 sent in round 0: G_1 + G_2; range 2 sent in
  // round 1: G_2.
  CHECK(out == std::vector<float>{111, 220, 400});
  // Peer 0 received range 0 in round 0 and range 1 in round 1.
  undelivered(q, part, 0, out);
  CHECK(out == std::vector<float>{110, 200, 444});
  // Round 2 sent, round 3 open and empty: peer 1 got range 0 (g*_2 = G_0 + G_1 + G_2) in round 2.
  q.advance();
  undelivered(q, part, 1, out);
  CHECK(out == std::vector<float>{0, 220, 400});
}

TEST_CASE("undelivered completes delivery: every peer then holds every gradient exactly once",
          "[ako][accumulation][undelivered][exactly-once]") {
  // p = 1, p < n - 1, p = n - 1, p = n, p > n; one gradient per round (the paper) and several;
  // fewer rounds than p (even none), about p, and many; with and without an open round's
  // pending gradients.
  const std::vector<std::pair<std::size_t, std::size_t>> cases = {
      {2, 1}, {4, 1}, {5, 2}, {6, 3}, {3, 2}, {4, 3}, {3, 3}, {2, 5}, {3, 7}};
  constexpr std::size_t m = 23;
  unsigned seed = 100;
  for (const auto& [n, p] : cases) {
    for (bool coalesce : {false, true}) {
      GradientSource source(m, seed++);
      const std::vector<std::size_t> round_counts = {
          0, 1, p - 1, p, p + 1, 2 * p, 3 * p + 5 + source.upto(9)};
      for (const std::size_t rounds : round_counts) {
        for (const bool with_pending : {false, true}) {
          INFO("n = " << n << ", p = " << p << ", rounds = " << rounds
                      << (coalesce ? ", coalescing" : "") << (with_pending ? ", pending" : ""));
          const RangePartition part(m, p);
          std::vector<Sender> senders;
          for (std::size_t j = 0; j < n; ++j) senders.emplace_back(m, p);
          Inbox received = empty_inbox(n, m);
          for (std::size_t j = 0; j < n; ++j) {
            // Senders need not be in step: some run a round or two more.
            const std::size_t own_rounds = rounds + (j % 3 == 2 ? source.upto(2) : 0);
            const std::size_t pending = with_pending ? 1 + source.upto(2) : 0;
            run_rounds(senders[j], j, part, own_rounds, pending, coalesce, source, received);
          }
          for (std::size_t j = 0; j < n; ++j) send_undelivered(senders[j], j, part, received);
          check_all_delivered(senders, received);
        }
      }
    }
  }
}

TEST_CASE("switching p mid-job: undelivered, then a fresh queue, loses and repeats nothing",
          "[ako][accumulation][undelivered][exactly-once]") {
  constexpr std::size_t m = 19;
  const std::vector<std::pair<std::size_t, std::size_t>> switches = {{3, 5}, {5, 2}, {1, 4}, {4, 1},
                                                                     {2, 2}, {7, 3}, {3, 7}};
  unsigned seed = 200;
  for (const std::size_t n : {2, 4}) {
    for (const auto& [p1, p2] : switches) {
      for (bool coalesce : {false, true}) {
        GradientSource source(m, seed++);
        const std::size_t rounds1 = source.upto(3 * p1 + 2);
        const std::size_t rounds2 = source.upto(3 * p2 + 2);
        INFO("n = " << n << ", p " << p1 << " -> " << p2 << ", rounds " << rounds1 << " then "
                    << rounds2 << (coalesce ? ", coalescing" : ""));
        const RangePartition part1(m, p1);
        const RangePartition part2(m, p2);
        std::vector<Sender> senders;
        for (std::size_t j = 0; j < n; ++j) senders.emplace_back(m, p1);
        Inbox received = empty_inbox(n, m);
        for (std::size_t j = 0; j < n; ++j) {
          run_rounds(senders[j], j, part1, rounds1, source.upto(2), coalesce, source, received);
        }
        for (std::size_t j = 0; j < n; ++j) send_undelivered(senders[j], j, part1, received);
        check_all_delivered(senders, received);  // complete at the switch
        for (std::size_t j = 0; j < n; ++j) {
          senders[j].queue = AccumulationQueue(m, p2);
          run_rounds(senders[j], j, part2, rounds2, source.upto(2), coalesce, source, received);
        }
        for (std::size_t j = 0; j < n; ++j) send_undelivered(senders[j], j, part2, received);
        check_all_delivered(senders, received);
      }
    }
  }
}

TEST_CASE("window_sum: the last w round gradients over a range, w = p is g*",
          "[ako][accumulation]") {
  AccumulationQueue q(4, 3);
  std::vector<float> out(2);
  q.add(std::vector<float>{1, 2, 4, 8});
  q.window_sum({1, 2}, 2, out);  // round 0 open: only G_0 (rounds before the first are empty)
  CHECK(out == std::vector<float>{2, 4});
  q.advance();
  q.add(std::vector<float>{10, 20, 40, 80});
  q.advance();
  q.add(std::vector<float>{100, 200, 400, 800});
  q.window_sum({1, 2}, 1, out);
  CHECK(out == std::vector<float>{200, 400});
  q.window_sum({1, 2}, 2, out);
  CHECK(out == std::vector<float>{220, 440});
  q.window_sum({2, 2}, 3, out);  // the ring's p: g* itself
  CHECK(out == std::vector<float>{444, 888});
  q.advance();  // round 3 open and empty: G_0 has left the ring
  q.window_sum({0, 2}, 3, out);
  CHECK(out == std::vector<float>{110, 220});
  q.window_sum({0, 2}, 2, out);
  CHECK(out == std::vector<float>{100, 200});
  CHECK_THROWS_AS(q.window_sum({0, 2}, 0, out), gradmesh::ContractError);
  CHECK_THROWS_AS(q.window_sum({0, 2}, 4, out), gradmesh::ContractError);
  CHECK_THROWS_AS(q.window_sum({3, 2}, 2, out), gradmesh::ContractError);
  std::vector<float> wrong(3);
  CHECK_THROWS_AS(q.window_sum({0, 2}, 2, wrong), gradmesh::ContractError);
}

TEST_CASE(
    "links of different speeds: a partition count per peer still delivers every gradient "
    "exactly once",
    "[ako][accumulation][undelivered][exactly-once]") {
  // Per receiver i, sender j sends at p_(i) partitions out of a ring of max p: the rotation over
  // each link's own p and its window of the last p_(i) rounds (AkoStage's per-link sizing).
  constexpr std::size_t m = 29;
  const std::vector<std::vector<std::size_t>> link_counts = {
      {3, 6}, {1, 2, 4}, {5, 2, 5, 10}, {7, 7, 3}, {2, 9}};
  unsigned seed = 300;
  for (const auto& counts : link_counts) {
    const std::size_t n = counts.size();
    const std::size_t ring = *std::max_element(counts.begin(), counts.end());
    std::vector<RangePartition> parts;
    for (const std::size_t p : counts) parts.emplace_back(m, p);
    for (bool coalesce : {false, true}) {
      GradientSource source(m, seed++);
      for (const std::size_t rounds : {std::size_t{0}, ring - 1, ring + 1, 4 * ring + 3}) {
        INFO("link counts " << counts.size() << " peers, ring " << ring << ", rounds " << rounds
                            << (coalesce ? ", coalescing" : ""));
        std::vector<Sender> senders;
        for (std::size_t j = 0; j < n; ++j) senders.emplace_back(m, ring);
        Inbox received = empty_inbox(n, m);
        for (std::size_t j = 0; j < n; ++j) {
          run_link_rounds(senders[j], j, parts, rounds + source.upto(2), source.upto(2), coalesce,
                          source, received);
        }
        std::vector<float> out(m);
        for (std::size_t j = 0; j < n; ++j) {
          for (std::size_t i = 0; i < n; ++i) {
            if (i == j) continue;
            undelivered(senders[j].queue, parts[i], i, out);
            for (std::size_t x = 0; x < m; ++x) received[i][j][x] += out[x];
          }
        }
        check_all_delivered(senders, received);
      }
    }
  }
}

TEST_CASE("round_gradient(r) is G_r for the p rounds in the ring, a ContractError outside",
          "[ako][accumulation]") {
  AccumulationQueue q(2, 3);
  auto round = [&q](std::uint64_t r) {
    const auto g = q.round_gradient(r);
    return std::vector<float>(g.begin(), g.end());
  };
  CHECK(round(0) == std::vector<float>{0, 0});
  q.add(std::vector<float>{1, 10});
  CHECK(round(0) == std::vector<float>{1, 10});
  CHECK_THROWS_AS(q.round_gradient(1), gradmesh::ContractError);  // not yet
  q.advance();
  q.add(std::vector<float>{2, 20});
  q.add(std::vector<float>{4, 40});  // two gradients in round 1
  CHECK(round(0) == std::vector<float>{1, 10});
  CHECK(round(1) == std::vector<float>{6, 60});
  q.advance();
  q.add(std::vector<float>{8, 80});
  CHECK(round(0) == std::vector<float>{1, 10});
  CHECK(round(1) == std::vector<float>{6, 60});
  CHECK(round(2) == std::vector<float>{8, 80});
  q.advance();  // round 3 open, empty; round 0 has left the ring
  CHECK(round(1) == std::vector<float>{6, 60});
  CHECK(round(2) == std::vector<float>{8, 80});
  CHECK(round(3) == std::vector<float>{0, 0});
  CHECK_THROWS_AS(q.round_gradient(0), gradmesh::ContractError);
  CHECK_THROWS_AS(q.round_gradient(4), gradmesh::ContractError);
  CHECK_THROWS_AS(q.round_gradient(UINT64_MAX), gradmesh::ContractError);
  for (int i = 0; i < 5; ++i) q.advance();  // round 8 open
  CHECK_THROWS_AS(q.round_gradient(5), gradmesh::ContractError);
  CHECK(round(6) == std::vector<float>{0, 0});
  CHECK(round(8) == std::vector<float>{0, 0});

  // p = 1: only the open round.
  AccumulationQueue one(1, 1);
  one.add(std::vector<float>{3});
  CHECK(one.round_gradient(0)[0] == 3.0f);
  one.advance();
  CHECK(one.round_gradient(1)[0] == 0.0f);
  CHECK_THROWS_AS(one.round_gradient(0), gradmesh::ContractError);
  CHECK_THROWS_AS(one.round_gradient(2), gradmesh::ContractError);
}

TEST_CASE(
    "undelivered rejects a partition above the ring's p or of another size, and a wrong output "
    "size",
    "[ako][accumulation][undelivered]") {
  AccumulationQueue q(10, 3);
  q.add(std::vector<float>(10, 1.0f));
  std::vector<float> out(10);
  CHECK_NOTHROW(undelivered(q, RangePartition(10, 3), 0, out));
  // A link with fewer partitions than the ring holds (links of different speeds) is one of its
  // windows; more than the ring holds is not.
  CHECK_NOTHROW(undelivered(q, RangePartition(10, 2), 0, out));
  CHECK_THROWS_AS(undelivered(q, RangePartition(10, 4), 0, out), gradmesh::ContractError);
  CHECK_THROWS_AS(undelivered(q, RangePartition(11, 3), 0, out), gradmesh::ContractError);
  CHECK_THROWS_AS(undelivered(q, RangePartition(9, 3), 0, out), gradmesh::ContractError);
  std::vector<float> short_out(9);
  std::vector<float> long_out(11);
  CHECK_THROWS_AS(undelivered(q, RangePartition(10, 3), 0, short_out), gradmesh::ContractError);
  CHECK_THROWS_AS(undelivered(q, RangePartition(10, 3), 0, long_out), gradmesh::ContractError);
}
