// Adam and AdamW (the node's one Optimizer, tasks/optim/adam.h) under the BSP strategies, on the
// in-process transport: every replica the same bits, equal to one process stepping Adam on the
// union batches; Ako refuses them.

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "tests/sync/support/inproc_cluster.h"

using namespace gradmesh;
using gradmesh::testing::InProcCluster;
using gradmesh::testing::SyntheticJob;

TEST_CASE("Adam and AdamW under ps, allreduce, poseidon and auto equal the union batches' Adam",
          "[sync][adam][inproc]") {
  constexpr std::uint64_t kIterations = 6;
  // Measured: 6.0e-8 and 6.7e-8 (the union batch sums its gradient in one GEMM, the nodes per
  // shard); 1e-5 is 150 times that.
  constexpr double kTolerance = 1e-5;
  for (const bool decoupled : {false, true}) {
    SyntheticJob job;
    job.sgd = {0.01f, 0.0f, 0.01f};
    job.adam = tasks::AdamOptions{0.9f, 0.999f, 1e-8f, decoupled};
    const std::size_t nodes = 3;
    const auto reference = testing::union_reference(job, nodes, kIterations);
    for (const std::string strategy : {"ps", "allreduce", "poseidon", "auto"}) {
      INFO((decoupled ? "AdamW, " : "Adam, ") << strategy);
      InProcCluster cluster(job, strategy, nodes);
      cluster.train(kIterations);
      const auto all = testing::replicas(cluster);
      for (std::size_t r = 1; r < nodes; ++r) CHECK(all[r] == all[0]);
      CHECK(testing::max_abs_difference(all[0], reference) <= kTolerance);
    }
  }
}

TEST_CASE("Ako refuses Adam, naming what it needs", "[sync][adam][inproc]") {
  SyntheticJob job;
  job.adam = tasks::AdamOptions{};
  CHECK_THROWS_WITH(InProcCluster(job, "ako", 2),
                    Catch::Contains("optimizer.algorithm must be \"sgd\""));
}
