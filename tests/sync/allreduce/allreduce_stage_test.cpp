// Tests for sync/allreduce/allreduce_stage.h on the in-process transport.

#include "sync/allreduce/allreduce_stage.h"

#include <catch2/catch.hpp>

#include "tests/sync/support/inproc_cluster.h"

using namespace gradmesh;
using gradmesh::testing::InProcCluster;
using gradmesh::testing::InProcNode;
using gradmesh::testing::SyntheticJob;

TEST_CASE("allreduce on the in-process transport equals training on the union batches",
          "[sync][allreduce][inproc]") {
  for (const std::size_t nodes : {2, 3, 4}) {
    SyntheticJob job;
    constexpr std::uint64_t kIterations = 6;
    std::vector<std::size_t> all(nodes);
    for (std::size_t r = 0; r < nodes; ++r) all[r] = r;
    InProcNode single(job, "none", 0, 1, nullptr, all);
    for (std::uint64_t i = 0; i < kIterations; ++i) single.step();

    InProcCluster cluster(job, "allreduce", nodes);
    cluster.train(kIterations);
    for (std::size_t r = 0; r < nodes; ++r) {
      INFO(nodes << " nodes, rank " << r);
      CHECK(testing::max_abs_difference(cluster.node(r).model().parameters(),
                                        single.model().parameters()) <= 1e-5);
      // The ring leaves every rank the same bits.
      CHECK(testing::max_abs_difference(cluster.node(r).model().parameters(),
                                        cluster.node(0).model().parameters()) == 0.0);
      CHECK(cluster.node(r).stage().rejected_messages() == 0);
      CHECK(cluster.node(r).stage().summary().at("buckets") >= 1);
    }
  }
}

TEST_CASE("allreduce: bytes sent per iteration match the plan's prediction",
          "[sync][allreduce][inproc]") {
  SyntheticJob job;
  InProcCluster cluster(job, "allreduce", 3);
  constexpr std::uint64_t kIterations = 5;
  cluster.train(kIterations);
  for (std::size_t r = 0; r < 3; ++r) {
    const double measured =
        static_cast<double>(cluster.transport(r).counters().bytes_sent_by_stage.at("allreduce")) /
        kIterations;
    double predicted = 0;
    for (const auto& row : cluster.node(r).stage().plan()) predicted += row.predicted_bytes_sent;
    INFO("rank " << r << ": measured " << measured << ", predicted " << predicted);
    CHECK(measured == Approx(predicted).epsilon(0.05));
  }
}

TEST_CASE("allreduce with one node steps each layer locally", "[sync][allreduce]") {
  SyntheticJob job;
  InProcNode alone(job, "allreduce", 0, 1, nullptr, {0});
  InProcNode none(job, "none", 0, 1, nullptr, {0});
  for (int i = 0; i < 3; ++i) {
    alone.step();
    none.step();
  }
  CHECK(testing::max_abs_difference(alone.model().parameters(), none.model().parameters()) == 0.0);
}
