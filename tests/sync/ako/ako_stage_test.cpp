// Tests for sync/ako/ako_stage.h on the in-process transport.

#include "sync/ako/ako_stage.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "sync/probe/link_probe.h"
#include "tests/sync/support/inproc_cluster.h"
#include "topo/cost_model.h"

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
    job.options.ako.final_model = sync::AkoFinal::kFold;  // every gradient applied everywhere
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

TEST_CASE("ako: a peer that fails is dropped; the survivors run past its bound and finish",
          "[sync][ako][inproc][failure]") {
  // Ako SoCC'16 sec. 4.3: the remaining nodes go on.
  SyntheticJob job;
  job.options.ako.partitions = 2;
  job.options.ako.staleness = 1;
  InProcCluster cluster(job, "ako", 3);
  cluster.train(2);
  cluster.transport(2).close();
  // Far past p + tau iterations ahead of the dead peer's clock: no gate waits for it.
  std::vector<std::thread> survivors;
  std::vector<std::exception_ptr> errors(2);
  for (std::size_t r = 0; r < 2; ++r) {
    survivors.emplace_back([&, r] {
      try {
        for (int i = 0; i < 20; ++i) cluster.node(r).step();
        cluster.node(r).stage().finish();
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : survivors) t.join();
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == nullptr);
    const auto summary = cluster.node(r).stage().summary();
    CHECK(summary.at("peers_failed") == 1.0);
    CHECK(summary.at("gradients") == 22.0);
    CHECK(cluster.node(r).stage().rejected_messages() == 0);
    for (const float w : cluster.node(r).model().parameters()) REQUIRE(std::isfinite(w));
  }
}

TEST_CASE("ako with momentum: each node's velocity is what travels, once to every replica",
          "[sync][ako][inproc]") {
  SyntheticJob job;
  job.sgd.momentum = 0.9f;
  job.sgd.weight_decay = 1e-3f;
  job.options.ako.partitions = 3;
  job.options.ako.staleness = 1;
  job.options.ako.final_model = sync::AkoFinal::kFold;
  InProcCluster cluster(job, "ako", 3);
  cluster.train(20);
  cluster.finish();
  for (std::size_t r = 1; r < 3; ++r) {
    INFO("rank " << r);
    // Every replica applied -lr v of every node's every step (its own at once, the others' as
    // they arrived): equal up to the order of float additions.
    CHECK(testing::max_abs_difference(cluster.node(r).model().parameters(),
                                      cluster.node(0).model().parameters()) <= 1e-4);
  }
  for (std::size_t r = 0; r < 3; ++r) {
    bool moved = false;  // the velocity is kept (momentum on): some entry is non-zero
    for (const float v : cluster.node(r).optimizer().velocity()) moved = moved || v != 0.0f;
    CHECK(moved);
  }
}

TEST_CASE("ako's final model by default: the mean of the replicas, the same bits everywhere",
          "[sync][ako][inproc]") {
  SyntheticJob job;
  job.sgd.momentum = 0.0f;
  job.options.ako.partitions = 3;
  job.options.ako.staleness = 2;
  InProcCluster cluster(job, "ako", 3);
  cluster.train(15);
  // The replicas before the end differ (partitions still in flight or staged).
  std::vector<double> mean(cluster.node(0).model().parameters().size(), 0.0);
  for (std::size_t r = 0; r < 3; ++r) {
    const auto w = cluster.node(r).model().parameters();
    for (std::size_t i = 0; i < w.size(); ++i) mean[i] += w[i] / 3.0;
  }
  cluster.finish();
  const auto w0 = cluster.node(0).model().parameters();
  for (std::size_t r = 1; r < 3; ++r) {
    const auto w = cluster.node(r).model().parameters();
    REQUIRE(w.size() == w0.size());
    CHECK(std::equal(w.begin(), w.end(), w0.begin()));  // bitwise
  }
  double worst = 0;
  for (std::size_t i = 0; i < w0.size(); ++i) worst = std::max(worst, std::abs(w0[i] - mean[i]));
  CHECK(worst <= 1e-5);
}

TEST_CASE("ako with links of different speeds: per-link partitions follow the measured rates, "
          "and every gradient still reaches every replica once",
          "[sync][ako][inproc][links]") {
  // The start-up probe measured every link at R except those of rank 2, at R / 2. Rank 0's links:
  // R to rank 1, R / 2 to rank 2 -> p_i = ceil(8 x mean / r_i): 6 and 12; rank 2's are equal: 8.
  const double rate = 100e6;
  sync::JobMeasurements measured;
  measured.links = topo::LinkMatrix::uniform(3, 1e-4, rate);
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 3; ++j) {
      if (i != j && (i == 2 || j == 2)) measured.links.bandwidth[i * 3 + j] = rate / 2;
    }
  }
  SyntheticJob job;
  job.sgd.momentum = 0.0f;
  job.options.ako.partitions = 8;
  job.options.ako.staleness = 2;
  job.options.ako.final_model = sync::AkoFinal::kFold;  // every gradient applied everywhere
  job.measured = &measured;
  InProcCluster cluster(job, "ako", 3);
  cluster.train(48);
  cluster.finish();
  const std::vector<std::vector<double>> expected = {{0, 6, 12}, {6, 0, 12}, {8, 8, 0}};
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(testing::max_abs_difference(cluster.node(r).model().parameters(),
                                      cluster.node(0).model().parameters()) <= 1e-4);
    const auto summary = cluster.node(r).stage().summary();
    CHECK(summary.at("partitions") == 8.0);
    CHECK(cluster.node(r).stage().rejected_messages() == 0);
    for (std::size_t peer = 0; peer < 3; ++peer) {
      if (peer == r) continue;
      INFO("link to rank " << peer);
      CHECK(summary.at("link_partitions_" + std::to_string(peer)) == expected[r][peer]);
    }
  }
  // Per-link payload bytes per round follow the rates (R : R / 2) within 10%.
  for (std::size_t r = 0; r < 2; ++r) {
    const auto summary = cluster.node(r).stage().summary();
    const double fast = summary.at("link_round_bytes_" + std::to_string(1 - r));
    const double slow = summary.at("link_round_bytes_2");
    INFO("rank " << r << ": " << fast << " bytes per round to the fast link, " << slow
                 << " to the slow one");
    REQUIRE(fast > 0);
    CHECK(slow / fast == Approx(0.5).epsilon(0.1));
  }
}
