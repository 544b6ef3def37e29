// Tests for sync/ako/ako_stage.h on the in-process transport.

#include "sync/ako/ako_stage.h"

#include <catch2/catch.hpp>

#include "tests/sync/support/inproc_cluster.h"

using namespace gradmesh;
using gradmesh::testing::InProcCluster;
using gradmesh::testing::SyntheticJob;

TEST_CASE("ako with a fixed p: every gradient reaches every replica once, replicas end equal",
          "[sync][ako][inproc]") {
  for (const std::size_t p : {1, 3}) {
    SyntheticJob job;
    job.sgd.momentum = 0.0f;  // Ako steps plain SGD (Algorithm 1 line 5)
    job.options.ako.partitions = p;
    job.options.ako.staleness = 2;
    InProcCluster cluster(job, "ako", 3);
    cluster.train(25);
    cluster.finish();
    for (std::size_t r = 0; r < 3; ++r) {
      INFO("p " << p << ", rank " << r);
      CHECK(testing::max_abs_difference(cluster.node(r).model().parameters(),
                                        cluster.node(0).model().parameters()) <= 1e-4);
      const auto summary = cluster.node(r).stage().summary();
      CHECK(summary.at("partitions") == static_cast<double>(p));
      CHECK(summary.at("gradients") == 25.0);
      CHECK(cluster.node(r).stage().rejected_messages() == 0);
    }
  }
}

TEST_CASE("ako: a peer that fails is a PeerError at the next staleness gate",
          "[sync][ako][inproc]") {
  SyntheticJob job;
  job.options.ako.partitions = 2;
  InProcCluster cluster(job, "ako", 2);
  cluster.train(2);
  cluster.transport(1).close();
  // Rank 0 may run up to p + tau iterations ahead of the dead peer's clock, then fails.
  const auto run_on = [&] {
    for (int i = 0; i < 10; ++i) cluster.node(0).step();
  };
  CHECK_THROWS_AS(run_on(), PeerError);
}
