// Tests for sync/ako/round_receiver.cpp: the rounds an Ako node receives, checked, staged
// (Algorithm 1, line 13) and clocked (line 14), without a stage or a transport.

#include "sync/ako/round_receiver.h"

#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include "sync/ako/messages.h"
#include "sync/ako/range_partition.h"

using gradmesh::net::Message;
using gradmesh::net::Payload;
using namespace gradmesh::sync::ako;

namespace {

constexpr std::size_t kFloats = 10;

Message round_of(std::uint64_t p, std::uint64_t k, std::uint64_t round, std::size_t floats,
                 float value) {
  const std::vector<float> values(floats, value);
  Message m;
  m.kind = static_cast<std::uint16_t>(Kind::kPartition);
  m.key = (p << kPartitionShift) | k;
  m.round = round;
  m.payload = Payload::copy_of(std::as_bytes(std::span<const float>(values)));
  return m;
}

struct Receiver {
  StagingDelta staging{kFloats};
  StalenessClocks clocks{3, 0};
  RoundReceiver receiver{3, kFloats, staging, clocks};
  std::vector<float> folded() {
    std::vector<float> w(kFloats, 0.0f);
    (void)staging.apply_to(w);
    return w;
  }
};

}  // namespace

TEST_CASE("a partition is staged as -lr x its range and advances its sender's clock",
          "[ako][receiver]") {
  Receiver r;
  const Range range = RangePartition(kFloats, 3).range(1);  // p = 3, k = 1
  CHECK(r.receiver.partition(1, round_of(3, 1, 5, range.size, 2.0f), 0.5f).empty());
  CHECK(r.clocks.clock(1) == 5);
  CHECK(r.clocks.clock(2) == 0);
  const std::vector<float> w = r.folded();
  for (std::size_t i = 0; i < kFloats; ++i) {
    const bool in = i >= range.offset && i < range.offset + range.size;
    INFO("float " << i);
    CHECK(w[i] == (in ? -1.0f : 0.0f));
  }
  CHECK(r.receiver.partitions_received() == 1);
  // A full round: every float, the same tag again allowed (a switch may repeat it).
  CHECK(r.receiver.full_round(1, round_of(0, 0, 5, kFloats, 1.0f), 1.0f).empty());
  CHECK(r.folded() == std::vector<float>(kFloats, -1.0f));
  CHECK(r.receiver.full_rounds_received() == 1);
}

TEST_CASE("a round that breaks the protocol is refused and changes nothing", "[ako][receiver]") {
  Receiver r;
  CHECK(r.receiver.partition(2, round_of(2, 0, 7, 5, 1.0f), 1.0f).empty());
  CHECK_THAT(r.receiver.partition(2, round_of(2, 1, 7, 5, 1.0f), 1.0f),
             Catch::Contains("a partition of round 7 after round 7"));
  CHECK_THAT(r.receiver.partition(2, round_of(0, 0, 8, 5, 1.0f), 1.0f),
             Catch::Contains("partition 0 of p = 0"));
  CHECK_THAT(r.receiver.partition(2, round_of(2, 2, 8, 5, 1.0f), 1.0f),
             Catch::Contains("partition 2 of p = 2"));
  CHECK_THAT(r.receiver.partition(2, round_of(11, 0, 8, 1, 1.0f), 1.0f),
             Catch::Contains("(m = 10 floats)"));
  CHECK_THAT(r.receiver.partition(2, round_of(2, 1, 8, 4, 1.0f), 1.0f),
             Catch::Contains("with 16 bytes (expected 20)"));
  CHECK_THAT(r.receiver.full_round(2, round_of(0, 0, 6, kFloats, 1.0f), 1.0f),
             Catch::Contains("a full round of round 6 after round 7"));
  CHECK_THAT(r.receiver.full_round(2, round_of(0, 0, 9, 3, 1.0f), 1.0f),
             Catch::Contains("a full round of 12 bytes (expected 40)"));
  CHECK(r.clocks.clock(2) == 7);
  CHECK(r.receiver.partitions_received() == 1);
  std::vector<float> expected(kFloats, 0.0f);
  for (std::size_t i = 0; i < 5; ++i) expected[i] = -1.0f;
  CHECK(r.folded() == expected);
}

TEST_CASE("a rejoined peer starts again from any round and re-enters the clocks with it",
          "[ako][receiver]") {
  Receiver r;
  CHECK(r.receiver.partition(1, round_of(1, 0, 40, kFloats, 1.0f), 1.0f).empty());
  r.clocks.drop(1);  // it failed
  r.receiver.readmit(1);
  // Its donor's clock is behind what it sent before it failed: accepted, and back in the bound.
  CHECK(r.receiver.partition(1, round_of(1, 0, 30, kFloats, 1.0f), 1.0f).empty());
  CHECK(r.clocks.clock(1) == 30);
}
