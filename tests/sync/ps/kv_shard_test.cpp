#include "sync/ps/kv_shard.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "sync/compress/codec.h"

using gradmesh::net::Payload;
using gradmesh::sync::KvShard;
using gradmesh::tasks::Optimizer;
using gradmesh::tasks::SgdOptions;
using gradmesh::topo::KvPlacement;
using gradmesh::topo::ParameterBlock;

namespace {
Payload floats(const std::vector<float>& v) {
  return Payload::copy_of(std::as_bytes(std::span(v)));
}
}  // namespace

TEST_CASE("a KV shard steps on the mean of the n pushes once all arrived", "[sync][ps][shard]") {
  const std::vector<ParameterBlock> blocks = {{0, 0, 6}};
  KvPlacement placement(blocks, 2, 3);  // chunk 0 -> rank 0, chunk 1 -> rank 1
  REQUIRE(placement.chunks()[0].owner == 0);
  const std::vector<float> initial = {1, 2, 3, 4, 5, 6};
  Optimizer optimizer(SgdOptions{0.5f, 0.0f, 0.0f}, initial.size());
  KvShard shard(placement, 0, initial, optimizer);
  CHECK(shard.owned_floats() == 3);

  CHECK(shard.push(1, 0, 0, floats({2, 2, 2})) == KvShard::PushResult::kAccepted);
  CHECK(shard.push(1, 0, 0, floats({2, 2, 2})) == KvShard::PushResult::kRejected);  // duplicate
  CHECK(shard.push(0, 0, 1, floats({0, 0, 0})) == KvShard::PushResult::kRejected);  // wrong round
  CHECK(shard.push(0, 1, 0, floats({0, 0, 0})) == KvShard::PushResult::kRejected);  // not owned
  std::string why;
  CHECK(shard.push(0, 0, 0, floats({0, 0}), &why) == KvShard::PushResult::kRejected);
  CHECK_THAT(why, Catch::Contains("expected 12"));
  CHECK(shard.push(0, 0, 0, floats({4, 0, -2})) == KvShard::PushResult::kReady);

  const auto updated = shard.reduce(0);
  // mean gradient = {3, 1, 0}; w -= 0.5 * g
  CHECK(std::vector<float>(updated.begin(), updated.end()) ==
        std::vector<float>{-0.5f, 1.5f, 3.0f});
  // the next round is open, the old one closed
  CHECK(shard.push(0, 0, 0, floats({1, 1, 1})) == KvShard::PushResult::kRejected);
  CHECK(shard.push(0, 0, 1, floats({1, 1, 1})) == KvShard::PushResult::kAccepted);
}

TEST_CASE("a KV shard with a wire codec decodes encoded pushes and refuses malformed ones",
          "[sync][ps][shard][compress]") {
  namespace compress = gradmesh::sync::compress;
  const std::vector<ParameterBlock> blocks = {{0, 0, 6}};
  KvPlacement placement(blocks, 2, 3);  // chunk 0 -> rank 0
  const std::vector<float> initial = {1, 2, 3, 4, 5, 6};
  Optimizer optimizer(SgdOptions{0.5f, 0.0f, 0.0f}, initial.size());
  KvShard shard(placement, 0, initial, optimizer, "int8");

  // Rank 1's chunk in int8 (one scale, 2 / 127), and what the shard must sum: its decoding.
  compress::Codec codec("int8", 3, compress::CompressorParams{}, false);
  const std::vector<float> g1 = {2.0f, -1.0f, 0.0f};
  std::vector<std::byte> wire(codec.encoded_bytes());
  (void)codec.encode(g1, wire, 0);
  std::vector<float> decoded(3);
  codec.decode(wire, decoded, 0);

  std::string why;
  // Malformed: a truncated encoding; and floats' size on the coded path.
  CHECK(shard.push_coded(1, 0, 0, Payload::copy_of(std::span(wire).first(4)), &why) ==
        KvShard::PushResult::kRejected);
  CHECK_THAT(why, Catch::Contains("chunk 0 push"));
  CHECK(shard.push_coded(1, 0, 0, Payload::copy_of(std::span<const std::byte>(wire)), &why) ==
        KvShard::PushResult::kAccepted);
  CHECK(shard.push(0, 0, 0, floats({4, 0, -2})) == KvShard::PushResult::kReady);
  bool coded = false;
  const auto updated = shard.reduce(0, &coded);
  CHECK(coded);
  // mean = (rank 0's floats + rank 1's decoding) / 2, summed in rank order; w -= 0.5 mean.
  for (std::size_t i = 0; i < 3; ++i) {
    const float mean = (std::vector<float>{4, 0, -2}[i] + decoded[i]) * 0.5f;
    CHECK(updated[i] == initial[i] - 0.5f * mean);
  }

  // A shard without a wire codec takes floats only.
  KvShard plain(placement, 0, initial, optimizer);
  CHECK(plain.push_coded(1, 0, 0, Payload::copy_of(std::span<const std::byte>(wire)), &why) ==
        KvShard::PushResult::kRejected);
  CHECK_THAT(why, Catch::Contains("floats only"));
}
