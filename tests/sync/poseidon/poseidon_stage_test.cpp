// Tests for sync/poseidon/poseidon_stage.h on the in-process transport: strategies ps and poseidon
// are BSP, so n nodes must equal one node trained on the union of their batches.

#include "sync/poseidon/poseidon_stage.h"

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "tests/sync/support/inproc_cluster.h"

using namespace gradmesh;
using gradmesh::testing::InProcCluster;
using gradmesh::testing::InProcNode;
using gradmesh::testing::SyntheticJob;

namespace {

// The reference: one node, strategy none, batch n K = the n nodes' batches concatenated.
std::vector<float> union_reference(const SyntheticJob& job, std::size_t nodes,
                                   std::uint64_t iterations) {
  std::vector<std::size_t> all(nodes);
  for (std::size_t r = 0; r < nodes; ++r) all[r] = r;
  InProcNode single(job, "none", 0, 1, nullptr, all);
  for (std::uint64_t i = 0; i < iterations; ++i) single.step();
  const auto p = single.model().parameters();
  return {p.begin(), p.end()};
}

void check_equals_union(const std::string& strategy, const std::string& sfb, std::size_t nodes) {
  SyntheticJob job;
  job.options.poseidon.sfb = sfb;
  job.options.ps.chunk_bytes = 96;  // several KV chunks per layer, spread over the owners
  constexpr std::uint64_t kIterations = 6;
  const auto reference = union_reference(job, nodes, kIterations);
  InProcCluster cluster(job, strategy, nodes);
  cluster.train(kIterations);
  for (std::size_t r = 0; r < nodes; ++r) {
    INFO(strategy << " sfb " << sfb << ", " << nodes << " nodes, rank " << r);
    CHECK(testing::max_abs_difference(cluster.node(r).model().parameters(), reference) <= 1e-5);
    CHECK(cluster.node(r).stage().rejected_messages() == 0);
  }
}

}  // namespace

TEST_CASE("ps on the in-process transport equals training on the union batches",
          "[sync][poseidon][inproc]") {
  for (const std::size_t nodes : {2, 3}) check_equals_union("ps", "never", nodes);
}

TEST_CASE("poseidon with SFB on every dense layer equals training on the union batches",
          "[sync][poseidon][inproc]") {
  for (const std::size_t nodes : {2, 3}) check_equals_union("poseidon", "always", nodes);
}

TEST_CASE("poseidon rejects and counts a message that breaks its protocol",
          "[sync][poseidon][inproc]") {
  SyntheticJob job;
  InProcCluster cluster(job, "ps", 2);
  // A gradient chunk with an unknown chunk id, then a parameter chunk from a non-owner.
  cluster.transport(1).send(0, net::Message{sync::stage_id("kv_push"), 1, 1u << 20, 0, {}});
  cluster.transport(1).send(0, net::Message{sync::stage_id("sf_broadcast"), 3, 0, 0, {}});
  cluster.train(2);  // training still works; the rejects were counted on the way
  CHECK(cluster.node(0).stage().rejected_messages() == 2);
  CHECK(cluster.node(1).stage().rejected_messages() == 0);
}

TEST_CASE("a peer that fails mid-job fails the others' iteration with its rank",
          "[sync][poseidon][inproc]") {
  SyntheticJob job;
  InProcCluster cluster(job, "ps", 3);
  cluster.train(1);
  cluster.transport(2).close();
  try {
    cluster.train(1);
    FAIL("training went on without rank 2");
  } catch (const PeerError& e) {
    // Rank 2 itself, or a survivor that failed first and aborted naming it.
    CHECK_THAT(e.what(), Catch::Contains("peer rank 2 (inproc:2)"));
  }
}
