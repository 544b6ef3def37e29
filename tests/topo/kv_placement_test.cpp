#include "topo/kv_placement.h"

#include <vector>

#include <catch2/catch.hpp>

using gradmesh::topo::KvPlacement;
using gradmesh::topo::ParameterBlock;

namespace {
// The demo MLP 784-256-256-10: each dense layer's [W | b]; ReLUs (layers 1, 3) own nothing.
std::vector<ParameterBlock> demo_blocks() {
  const std::size_t l0 = 784 * 256 + 256, l2 = 256 * 256 + 256, l4 = 256 * 10 + 10;
  return {{0, 0, l0}, {2, l0, l2}, {4, l0 + l2, l4}};
}
}  // namespace

TEST_CASE("every parameter is owned by exactly one chunk and one node", "[topo][kv]") {
  const auto blocks = demo_blocks();
  for (std::size_t nodes : {1u, 2u, 3u, 4u, 7u, 16u}) {
    KvPlacement placement(blocks, nodes, KvPlacement::auto_chunk_floats(269322, nodes));
    std::vector<int> owned(269322, 0);
    std::size_t total_load = 0;
    for (const auto& chunk : placement.chunks()) {
      REQUIRE(chunk.owner < nodes);
      for (std::size_t i = chunk.offset; i < chunk.offset + chunk.size; ++i) ++owned[i];
    }
    for (std::size_t r = 0; r < nodes; ++r) {
      total_load += placement.load(r);
      for (std::size_t id : placement.chunks_owned_by(r)) CHECK(placement.chunks()[id].owner == r);
    }
    CHECK(total_load == 269322);
    CHECK(std::count(owned.begin(), owned.end(), 1) == 269322);
    // chunks never cross a layer
    for (const auto& block : blocks) {
      for (std::size_t id : placement.chunks_of_layer(block.layer)) {
        const auto& chunk = placement.chunks()[id];
        CHECK(chunk.offset >= block.offset);
        CHECK(chunk.offset + chunk.size <= block.offset + block.size);
      }
    }
    CHECK(placement.chunks_of_layer(1).empty());
  }
}

TEST_CASE("the default chunk size balances the demo model within 1.1x of the mean", "[topo][kv]") {
  for (std::size_t nodes : {2u, 3u, 4u, 5u, 6u, 7u, 8u, 16u}) {
    KvPlacement placement(demo_blocks(), nodes, KvPlacement::auto_chunk_floats(269322, nodes));
    INFO("nodes = " << nodes << ", chunk floats = " << placement.chunk_floats());
    CHECK(placement.imbalance() <= 1.1);
  }
}

TEST_CASE("auto chunk size stays within Poseidon's 2 MB KV pair", "[topo][kv]") {
  CHECK(KvPlacement::auto_chunk_floats(1'000'000'000, 2) == 524288);
  CHECK(KvPlacement::auto_chunk_floats(10, 4) == 256);
  CHECK(KvPlacement::auto_chunk_floats(269322, 4) % 64 == 0);
}

TEST_CASE("placement is a pure function of its inputs", "[topo][kv]") {
  KvPlacement a(demo_blocks(), 5, 1000), b(demo_blocks(), 5, 1000);
  REQUIRE(a.chunks().size() == b.chunks().size());
  for (std::size_t i = 0; i < a.chunks().size(); ++i) {
    CHECK(a.chunks()[i].owner == b.chunks()[i].owner);
    CHECK(a.chunks()[i].offset == b.chunks()[i].offset);
  }
}
