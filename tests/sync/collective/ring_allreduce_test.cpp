// Tests for sync/collective/ring_allreduce.h: ranks as threads on the in-process transport.

#include "sync/collective/ring_allreduce.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "engine/executor.h"
#include "engine/graph.h"
#include "net/inproc/inproc_transport.h"
#include "sync/compress/compressor.h"
#include "tests/sync/support/half_round_trip.h"

using namespace gradmesh;

namespace {

// One rank: its router, ring and a graph of one round (fill, start, wait, check).
struct Rank {
  Rank(net::Transport* transport, std::size_t rank, std::size_t nodes, std::size_t floats,
       const sync::collective::SegmentCodec* wire)
      : router(transport, rank, nodes),
        lane(router.route(
            "allreduce",
            [this](std::size_t from, net::Message&& m) { ring->on_message(from, std::move(m)); })),
        ring(std::make_unique<sync::collective::RingAllReduce>(router, lane, 0, floats, 0, wire)),
        input(floats),
        sums(0) {}
  sync::LaneRouter router;
  sync::LaneId lane;
  std::unique_ptr<sync::collective::RingAllReduce> ring;
  std::vector<float> input;
  std::vector<std::vector<float>> sums;  // by round
};

// Rank r's input in round t: integers, so every sum is exact in floats.
float value(std::size_t rank, std::uint64_t round, std::size_t i) {
  return static_cast<float>((rank + 1) * 1000 + i % 997 + round * 7);
}

/// The sum a 16-bit ring computes in round `round`, step by step as the ring's documentation says:
/// segment j starts at rank j, encoded; each next rank adds its floats to the decoding in fp32 and
/// encodes the partial sum it passes on; the owner's encoding of the full sum is the result.
std::vector<float> half_ring_sum(std::string_view kind, const sync::collective::RingAllReduce& ring,
                                 std::size_t nodes, std::uint64_t round) {
  std::vector<float> out(ring.floats());
  for (std::size_t j = 0; j < nodes; ++j) {
    const std::size_t begin = ring.segment_begin(j), size = ring.segment_size(j);
    std::vector<float> sum(size);
    for (std::size_t i = 0; i < size; ++i) sum[i] = value(j, round, begin + i);
    if (nodes == 1) {
      std::copy(sum.begin(), sum.end(), out.begin() + static_cast<std::ptrdiff_t>(begin));
      continue;
    }
    sum = testing::half_round_trip(kind, sum);
    for (std::size_t k = 1; k < nodes; ++k) {
      for (std::size_t i = 0; i < size; ++i)
        sum[i] = value((j + k) % nodes, round, begin + i) + sum[i];
      sum = testing::half_round_trip(kind, sum);
    }
    std::copy(sum.begin(), sum.end(), out.begin() + static_cast<std::ptrdiff_t>(begin));
  }
  return out;
}

/// A segment format of the test's own (issue 56: the ring takes any SegmentCodec): each float
/// negated, then its bytes reversed; exact, 4 bytes a float plus a 2-byte tag a segment.
class ReversedNegated final : public sync::collective::SegmentCodec {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "reversed-negated"; }
  [[nodiscard]] std::size_t encoded_bytes(std::size_t floats) const noexcept override {
    return 2 + 4 * floats;
  }
  void encode(std::span<const float> values, std::byte* out,
              std::span<float> decoded) const override {
    out[0] = std::byte{0x5a};
    out[1] = std::byte{0xa5};
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float v = -values[i];
      const auto* b = reinterpret_cast<const std::byte*>(&v);
      for (int k = 0; k < 4; ++k) out[2 + 4 * i + k] = b[3 - k];
    }
    if (!decoded.empty()) decode(out, decoded);
  }
  void decode(const std::byte* in, std::span<float> out) const override {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = value_at(in, i);
  }
  void decode_add(const std::byte* in, std::span<float> sum) const override {
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += value_at(in, i);
  }

 private:
  static float value_at(const std::byte* in, std::size_t i) {
    float v = 0;
    auto* b = reinterpret_cast<std::byte*>(&v);
    for (int k = 0; k < 4; ++k) b[k] = in[2 + 4 * i + 3 - k];
    return -v;
  }
};

/// Runs `rounds` rounds of a ring of `nodes` ranks over `wire` (nullptr: floats) and checks every
/// rank's sums: exact for floats and for an exact format, for a 16-bit one (its name "fp16" or
/// "bf16") within one rounding a hop and exactly the ring's own roundings.
void run_ring(std::size_t nodes, std::size_t floats, std::uint64_t rounds,
              const sync::collective::SegmentCodec* wire = nullptr) {
  auto mesh = net::make_inproc_mesh(nodes, sync::lane_names());
  std::vector<std::unique_ptr<Rank>> ranks;
  const bool sixteen_bit = wire != nullptr && (wire->name() == "fp16" || wire->name() == "bf16");
  const std::string kind(sixteen_bit ? wire->name() : "");
  for (std::size_t r = 0; r < nodes; ++r) {
    ranks.push_back(std::make_unique<Rank>(mesh[r].get(), r, nodes, floats, wire));
  }
  for (auto& t : mesh) t->start();
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(nodes);
  for (std::size_t r = 0; r < nodes; ++r) {
    threads.emplace_back([&, r] {
      try {
        Rank& me = *ranks[r];
        engine::Executor executor({1, 1});
        engine::Graph graph;
        auto start = graph.emplace("start", engine::Arena::kNetwork, [&](engine::TaskContext& t) {
          for (std::size_t i = 0; i < floats; ++i) me.input[i] = value(r, t.run(), i);
          me.ring->start(t.run(), me.input);
        });
        auto wait = graph.emplace("wait", engine::Arena::kNetwork, [&](engine::TaskContext& t) {
          me.ring->await(t.run(), t.defer());
        });
        auto keep = graph.emplace("keep", engine::Arena::kCompute, [&](engine::TaskContext& t) {
          const auto sum = me.ring->result(t.run());
          me.sums.emplace_back(sum.begin(), sum.end());
        });
        start.precede(wait);
        wait.precede(keep);
        for (std::uint64_t t = 0; t < rounds; ++t) executor.run(graph);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  for (std::size_t r = 0; r < nodes; ++r) {
    REQUIRE(ranks[r]->sums.size() == rounds);
    CHECK(ranks[r]->router.rejected() == 0);
    for (std::uint64_t t = 0; t < rounds; ++t) {
      const std::vector<float> half =
          sixteen_bit ? half_ring_sum(kind, *ranks[r]->ring, nodes, t) : std::vector<float>();
      for (std::size_t i = 0; i < floats; ++i) {
        float expected = 0;
        for (std::size_t q = 0; q < nodes; ++q) expected += value(q, t, i);
        if (sixteen_bit) {
          // One rounding a hop, each within 2^-11 (fp16) or 2^-8 (bf16) of its partial sum.
          const double bound = nodes * (kind == "fp16" ? 0x1p-11 : 0x1p-8) * expected;
          if (std::fabs(ranks[r]->sums[t][i] - expected) > bound) {
            FAIL("n " << nodes << ", float " << i << ": " << ranks[r]->sums[t][i]
                      << " is more than " << bound << " from " << expected);
          }
          expected = half[i];  // and exactly the ring's rounding, on every rank
        }
        if (ranks[r]->sums[t][i] != expected) {
          FAIL("n " << nodes << ", " << floats << " floats, rank " << r << ", round " << t
                    << ", float " << i << ": " << ranks[r]->sums[t][i] << " != " << expected);
        }
      }
    }
  }
  std::vector<std::thread> leaving;  // clean goodbyes, all at once (each waits for the others)
  for (auto& t : mesh) leaving.emplace_back([&t] { t->shutdown(5.0); });
  for (auto& t : leaving) t.join();
}

}  // namespace

TEST_CASE("ring all-reduce sums exactly for n = 1..5 and odd sizes", "[sync][collective][inproc]") {
  for (std::size_t nodes = 1; nodes <= 5; ++nodes) {
    for (const std::size_t floats : {0, 1, 3, 7, 1001, 40961}) {
      INFO("n " << nodes << ", " << floats << " floats");
      run_ring(nodes, floats, 4);  // back-to-back rounds: peers run a round ahead
    }
  }
}

TEST_CASE("a 16-bit ring sums in fp32 with one rounding a hop, the same bits on every rank",
          "[sync][collective][compress][inproc]") {
  for (const std::string_view name : {"fp16", "bf16"}) {
    const sync::collective::SegmentCodec* wire = sync::compress::compressor_entry(name).segment;
    REQUIRE(wire != nullptr);
    CHECK(wire->name() == name);
    for (std::size_t nodes = 1; nodes <= 5; ++nodes) {
      INFO(name << ", n = " << nodes);
      run_ring(nodes, 1, 3, wire);
      run_ring(nodes, nodes * 37 + 3, 3, wire);
    }
  }
}

TEST_CASE("a ring takes any segment format: one of the test's own sums exactly",
          "[sync][collective][inproc]") {
  const ReversedNegated wire;
  for (std::size_t nodes = 1; nodes <= 4; ++nodes) {
    INFO("n " << nodes);
    run_ring(nodes, nodes * 5 + 2, 3, &wire);
  }
  auto mesh = net::make_inproc_mesh(2, sync::lane_names());
  sync::LaneRouter router(mesh[0].get(), 0, 2);
  const sync::collective::RingAllReduce ring(router, sync::lane_id("allreduce"), 0, 11, 0, &wire);
  CHECK(ring.wire_bytes(0) == 2 + 4 * 6);
}

TEST_CASE("a 16-bit ring sends 2 bytes a float and a scale a segment, and refuses floats",
          "[sync][collective][compress]") {
  auto mesh = net::make_inproc_mesh(2, sync::lane_names());
  sync::LaneRouter router(mesh[0].get(), 0, 2);
  const sync::LaneId lane = router.route("allreduce", [](std::size_t, net::Message&&) {});
  sync::collective::RingAllReduce ring(router, lane, 0, 11, 0,
                                       sync::compress::compressor_entry("fp16").segment);
  CHECK(ring.wire_bytes(0) == 4 + 2 * 6);
  CHECK(ring.wire_bytes(1) == 4 + 2 * 5);
  // A float segment (a peer without compression) is rejected, not read.
  const std::vector<float> floats(6, 1.0f);
  ring.on_message(
      1, net::Message{lane, 1, 0, 0, net::Payload::copy_of(std::as_bytes(std::span(floats))), 0});
  CHECK(router.rejected() == 1);
  // A ring sums what it receives: int8's chunk scales and the sparsifiers' indices are not for it.
  // (the registry gives them no segment format, and "none" needs none: floats).
  CHECK(sync::compress::compressor_entry("none").segment == nullptr);
  CHECK(sync::compress::compressor_entry("topk").segment == nullptr);
  CHECK(sync::compress::compressor_entry("int8").segment == nullptr);
}

TEST_CASE("ring segments cover the bucket, sizes within one float", "[sync][collective]") {
  auto mesh = net::make_inproc_mesh(3, sync::lane_names());
  sync::LaneRouter router(mesh[0].get(), 0, 3);
  const sync::collective::RingAllReduce ring(router, sync::lane_id("allreduce"), 0, 10);
  CHECK(ring.segment_begin(0) == 0);
  CHECK(ring.segment_size(0) == 4);
  CHECK(ring.segment_begin(1) == 4);
  CHECK(ring.segment_size(1) == 3);
  CHECK(ring.segment_begin(2) == 7);
  CHECK(ring.segment_size(2) == 3);
  sync::LaneRouter alone(nullptr, 0, 1);  // one rank: one segment, the whole buffer
  const sync::collective::RingAllReduce single(alone, 0, 0, 10);
  CHECK(single.segment_begin(0) == 0);
  CHECK(single.segment_size(0) == 10);
}

TEST_CASE("a failed ring fails the waiting and every later round, with the first error",
          "[sync][collective][inproc]") {
  auto mesh = net::make_inproc_mesh(2, sync::lane_names());
  sync::LaneRouter router(mesh[0].get(), 0, 2);
  sync::collective::RingAllReduce ring(router, sync::lane_id("allreduce"), 0, 8);
  engine::Executor executor({1, 1});
  engine::Graph graph;
  std::vector<float> input(8, 1.0f);
  auto start = graph.emplace("start", engine::Arena::kNetwork,
                             [&](engine::TaskContext& t) { ring.start(t.run(), input); });
  auto wait = graph.emplace("wait", engine::Arena::kNetwork, [&](engine::TaskContext& t) {
    ring.await(t.run(), t.defer());
    // The peer never answers: this rank's failure handler would fail the ring; here, at once.
    ring.fail_all(std::make_exception_ptr(PeerError(1, "rank 1", "first")));
    ring.fail_all(std::make_exception_ptr(PeerError(1, "rank 1", "second")));
  });
  start.precede(wait);
  mesh[0]->start();  // rank 1 never starts: its segment waits unread
  CHECK_THROWS_WITH(executor.run(graph), Catch::Contains("first"));
  CHECK_THROWS_WITH(ring.start(1, input), Catch::Contains("first"));
  mesh[0]->close();
}

TEST_CASE("ring all-reduce rejects a wrong size, a wrong sender and a stale round",
          "[sync][collective][inproc]") {
  auto mesh = net::make_inproc_mesh(3, sync::lane_names());
  sync::LaneRouter router(mesh[1].get(), 1, 3);
  sync::collective::RingAllReduce ring(router, sync::lane_id("allreduce"), 0, 9);
  const auto segment = [](std::size_t floats) {
    return net::Payload::copy_of(std::as_bytes(std::span<const float>(std::vector<float>(floats))));
  };
  using K = sync::collective::RingKind;
  const auto lane = sync::lane_id("allreduce");
  ring.on_message(
      0, net::Message{lane, static_cast<std::uint16_t>(K::kReduceScatter), 0, 0, segment(2)});
  ring.on_message(
      2, net::Message{lane, static_cast<std::uint16_t>(K::kReduceScatter), 0, 0, segment(3)});
  ring.on_message(
      0, net::Message{lane, static_cast<std::uint16_t>(K::kReduceScatter), 0, 5, segment(3)});
  ring.on_message(
      0, net::Message{lane, static_cast<std::uint16_t>(K::kReduceScatter), 7, 0, segment(3)});
  CHECK(router.rejected() == 4);
  // A well-formed early step is kept, and a repeat of it is a duplicate.
  ring.on_message(
      0, net::Message{lane, static_cast<std::uint16_t>(K::kReduceScatter), 0, 0, segment(3)});
  CHECK(router.rejected() == 4);
  ring.on_message(
      0, net::Message{lane, static_cast<std::uint16_t>(K::kReduceScatter), 0, 0, segment(3)});
  CHECK(router.rejected() == 5);
}
