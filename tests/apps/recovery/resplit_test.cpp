// Tests for apps/recovery/resplit.h: a checkpoint of n_old nodes turned into one of n_new nodes.

#include "apps/recovery/resplit.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/error.h"

using namespace gradmesh;
using gradmesh::app::Checkpoint;
using gradmesh::app::merge_velocities;
using gradmesh::app::rescale_iteration;
using gradmesh::app::resplit_checkpoint;

namespace {

std::vector<std::byte> floats_section(const std::vector<float>& values) {
  engine::StateWriter out;
  out.write_floats(values);
  return {out.bytes().begin(), out.bytes().end()};
}

std::vector<std::byte> text_section(const std::string& text) {
  engine::StateWriter out;
  out.write_string(text);
  return {out.bytes().begin(), out.bytes().end()};
}

std::string text_of(const std::vector<std::byte>& bytes) {
  engine::StateReader in(bytes, "test");
  return in.read_string();
}

}  // namespace

TEST_CASE("rescale_iteration keeps the epoch and its fraction", "[resume][resplit]") {
  CHECK(rescale_iteration(0, 20, 13) == 0);
  CHECK(rescale_iteration(20, 20, 13) == 13);       // epoch 1's start
  CHECK(rescale_iteration(25, 20, 13) == 13 + 3);   // 5/20 of 13 = 3.25 -> 3
  CHECK(rescale_iteration(30, 20, 10) == 15);       // half way: exact
  CHECK(rescale_iteration(39, 20, 13) == 13 + 12);  // 19/20 of 13 = 12.35 -> 12
  CHECK(rescale_iteration(19, 20, 4) == 4);         // 19/20 of 4 = 3.8 -> 4: epoch 1's start
  CHECK_THROWS_AS(rescale_iteration(5, 0, 4), ContractError);
}

TEST_CASE("merge_velocities takes each parameter's value of the largest magnitude",
          "[resume][resplit]") {
  // Two PS chunks [0, 2) owned by rank 0 and [2, 4) by rank 1 (zero elsewhere), then a layer
  // stepped on every node (the same values everywhere).
  const std::vector<std::vector<float>> v = {{0.5f, -0.25f, 0.0f, 0.0f, 1.5f, -2.0f},
                                             {0.0f, 0.0f, -3.0f, 0.125f, 1.5f, -2.0f},
                                             {0.0f, 0.0f, 0.0f, 0.0f, 1.5f, -2.0f}};
  CHECK(merge_velocities(v) == std::vector<float>{0.5f, -0.25f, -3.0f, 0.125f, 1.5f, -2.0f});
  CHECK_THROWS_AS(merge_velocities({}), ContractError);
  const std::vector<std::vector<float>> uneven = {{1.0f}, {1.0f, 2.0f}};
  CHECK_THROWS_AS(merge_velocities(uneven), ContractError);
}

TEST_CASE(
    "resplit_checkpoint: the replica and cursor of rank 0, merged velocities, a user's "
    "state of the same rank",
    "[resume][resplit]") {
  std::vector<Checkpoint> old(3);
  for (std::size_t r = 0; r < 3; ++r) {
    old[r].header.rank = r;
    old[r].header.nodes = 3;
    old[r].header.iteration = 25;
    old[r].sections["model"] = text_section("replica");  // equal on every node under BSP
    old[r].sections["cursor"] = text_section("cursor");
    old[r].sections["sync"] = text_section("plan of 3");
    old[r].sections["optimizer"] =
        floats_section({r == 0 ? 1.0f : 0.0f, r == 1 ? -2.0f : 0.0f, 4.0f});
    old[r].sections["mine"] = text_section("user state of rank " + std::to_string(r));
  }
  SECTION("on 2 nodes") {
    const Checkpoint c = resplit_checkpoint(old, 1, 2, "old");
    CHECK(c.header.rank == 1);
    CHECK(c.header.nodes == 2);
    CHECK(c.header.iteration == 25);
    CHECK(text_of(c.sections.at("model")) == "replica");
    CHECK(text_of(c.sections.at("cursor")) == "cursor");
    CHECK(text_of(c.sections.at("mine")) == "user state of rank 1");
    engine::StateReader in(c.sections.at("optimizer"), "merged");
    CHECK(in.read_float_vector() == std::vector<float>{1.0f, -2.0f, 4.0f});
  }
  SECTION("on 4 nodes: rank 3 had no node in the old job, its user state is rank 0's") {
    const Checkpoint c = resplit_checkpoint(old, 3, 4, "old");
    CHECK(text_of(c.sections.at("mine")) == "user state of rank 0");
  }
  SECTION("a missing section is named") {
    old[2].sections.erase("optimizer");
    CHECK_THROWS_WITH(resplit_checkpoint(old, 0, 2, "ckpt-25"), Catch::Contains("ckpt-25") &&
                                                                    Catch::Contains("rank 2") &&
                                                                    Catch::Contains("'optimizer'"));
  }
}

TEST_CASE(
    "resplit_checkpoint by replica: each rank's own replica, optimizer and stage state, a new "
    "rank rank 0's",
    "[resume][resplit][local]") {
  std::vector<Checkpoint> old(3);
  for (std::size_t r = 0; r < 3; ++r) {
    const std::string of = " of rank " + std::to_string(r);
    old[r].header.rank = r;
    old[r].header.nodes = 3;
    old[r].header.iteration = 25;
    old[r].sections["model"] = text_section("replica" + of);  // local: each node's own
    old[r].sections["cursor"] = text_section("cursor");
    old[r].sections["sync"] = text_section("outer state" + of);
    old[r].sections["optimizer"] = floats_section({static_cast<float>(r), 1.0f});
    old[r].sections["mine"] = text_section("user state" + of);
  }
  const auto resplit = [&](std::size_t rank, std::size_t nodes) {
    return resplit_checkpoint(old, rank, nodes, "old", app::ResplitKind::kByReplica);
  };
  SECTION("on 2 nodes: rank 1 goes on with rank 1's, nothing merged") {
    const Checkpoint c = resplit(1, 2);
    CHECK(c.header.rank == 1);
    CHECK(c.header.nodes == 2);
    CHECK(text_of(c.sections.at("model")) == "replica of rank 1");
    CHECK(text_of(c.sections.at("sync")) == "outer state of rank 1");
    CHECK(text_of(c.sections.at("mine")) == "user state of rank 1");
    engine::StateReader in(c.sections.at("optimizer"), "own");
    CHECK(in.read_float_vector() == std::vector<float>{1.0f, 1.0f});
  }
  SECTION("on 4 nodes: rank 3 takes rank 0's") {
    const Checkpoint c = resplit(3, 4);
    CHECK(text_of(c.sections.at("model")) == "replica of rank 0");
    CHECK(text_of(c.sections.at("sync")) == "outer state of rank 0");
    CHECK(text_of(c.sections.at("cursor")) == "cursor");
  }
  SECTION("a missing section is named") {
    old[1].sections.erase("sync");
    CHECK_THROWS_WITH(resplit(1, 2), Catch::Contains("rank 1") && Catch::Contains("'sync'"));
  }
}
