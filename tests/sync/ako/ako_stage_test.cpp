// Tests for sync/ako/ako_stage.h on the in-process transport.

#include "sync/ako/ako_stage.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "sync/probe/link_probe.h"
#include "tests/support/threads.h"
#include "tests/sync/support/inproc_cluster.h"
#include "topo/cost_model.h"

using namespace gradmesh;
using gradmesh::testing::InProcCluster;
using gradmesh::testing::message_of;
using gradmesh::testing::SyntheticJob;

TEST_CASE("ako with a fixed p: every gradient reaches every replica once, replicas end equal",
          "[sync][ako][inproc]") {
  for (const std::size_t p : {1, 3}) {
    SyntheticJob job;
    job.sgd.momentum = 0.0f;  // Ako steps plain SGD (Algorithm 1 line 5)
    job.options.values.set("ako.partitions", static_cast<std::int64_t>(p));
    job.options.values.set("ako.staleness", std::int64_t{2});
    job.options.values.set("ako.final", std::string("fold"));  // every gradient applied everywhere
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

namespace {

/// Cuts the links between every rank of `a` and every rank of `b` (a network partition).
void partition(InProcCluster& cluster, const std::vector<std::size_t>& a,
               const std::vector<std::size_t>& b) {
  for (const std::size_t i : a)
    for (const std::size_t j : b) cluster.transport(i).cut_link(j);
}

/// Each of `ranks` (default: every node) on its own thread: `iterations` steps, then finish() and
/// check_quorum(); what each threw (or null), by rank.
std::vector<std::exception_ptr> run_on(InProcCluster& cluster, int iterations,
                                       std::vector<std::size_t> ranks = {}) {
  return testing::run_on_threads(
      cluster.size(),
      [&](std::size_t r) {
        for (int i = 0; i < iterations; ++i) cluster.node(r).step();
        cluster.node(r).stage().finish();
        cluster.node(r).stage().check_quorum();
      },
      std::move(ranks));
}

/// Two steps of every node together, then the links between `a` and `b` cut (partition()), then
/// 20 steps on each node, finish() and check_quorum(): what each threw (or null), by rank.
std::vector<std::exception_ptr> run_split(InProcCluster& cluster, const std::vector<std::size_t>& a,
                                          const std::vector<std::size_t>& b) {
  cluster.train(2);
  partition(cluster, a, b);
  return run_on(cluster, 20);
}

/// The failure tests' job: p = 2, tau = 1 (a node runs at most p + tau = 3 gradients ahead of
/// its slowest live peer).
SyntheticJob failure_job() {
  SyntheticJob job;
  job.options.values.set("ako.partitions", std::int64_t{2});
  job.options.values.set("ako.staleness", std::int64_t{1});
  return job;
}

}  // namespace

TEST_CASE("ako: a peer that fails is dropped, the survivors run past its bound and finish",
          "[sync][ako][inproc][failure]") {
  // Ako SoCC'16 sec. 4.3: the remaining nodes go on.
  SyntheticJob job = failure_job();
  InProcCluster cluster(job, "ako", 3);
  cluster.train(2);
  cluster.transport(2).close();
  // Far past p + tau iterations ahead of the dead peer's clock: no gate waits for it. The two left
  // are a majority of the 3 (sync::Quorum).
  const auto errors = run_on(cluster, 20, {0, 1});
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

TEST_CASE("ako: a node cut off from the others stops, the majority goes on without it",
          "[sync][ako][inproc][failure][partition]") {
  // The small side of a partition (or a node woken from a pause after the others dropped it)
  // sees every peer fail; Ako has no views, so the rule counts against the job's n (sync::Quorum).
  SyntheticJob job = failure_job();
  InProcCluster cluster(job, "ako", 4);
  const auto errors = run_split(cluster, {3}, {0, 1, 2});
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == nullptr);
    CHECK(cluster.node(r).stage().summary().at("peers_failed") == 1.0);
    CHECK_NOTHROW(cluster.node(r).stage().check_quorum());
  }
  REQUIRE(errors[3] != nullptr);
  const std::string why = message_of(errors[3]);
  CHECK_THAT(why, Catch::StartsWith("cut off from the majority: this node lost contact with ") &&
                      Catch::Contains("2 of the 4 nodes it ran with") &&
                      Catch::Contains("more than half of them (3)") &&
                      Catch::Contains("writes no metrics or checkpoints"));
  // It stops at the second loss, so it names the first two peers whose links it saw cut, in
  // whatever order the cut reached them (ranks 0 and 1, 0 and 2 or 1 and 2).
  int named = 0;
  for (const char* peer : {"rank 0 (", "rank 1 (", "rank 2 ("}) {
    named += why.find(peer) != std::string::npos ? 1 : 0;
  }
  CHECK(named >= 2);
  CHECK_THROWS_WITH(cluster.node(3).stage().check_quorum(), why);
  CHECK_THROWS_WITH(cluster.node(3).stage().finish(), why);
}

TEST_CASE("ako: a 2 + 2 split stops both halves, and net.min_nodes = 2 lets each go on",
          "[sync][ako][inproc][failure][partition]") {
  SyntheticJob job = failure_job();
  SECTION("majority (the default): neither half has one") {
    InProcCluster cluster(job, "ako", 4);
    const auto errors = run_split(cluster, {0, 1}, {2, 3});
    for (std::size_t r = 0; r < 4; ++r) {
      INFO("rank " << r);
      REQUIRE(errors[r] != nullptr);
      CHECK_THAT(message_of(errors[r]), Catch::Contains("cut off from the majority") &&
                                            Catch::Contains("2 of the 4 nodes it ran with"));
    }
  }
  SECTION("net.min_nodes = 2: the user's choice, both halves train on") {
    job.min_nodes = 2;
    InProcCluster cluster(job, "ako", 4);
    const auto errors = run_split(cluster, {0, 1}, {2, 3});
    for (std::size_t r = 0; r < 4; ++r) {
      INFO("rank " << r);
      CHECK(errors[r] == nullptr);
      CHECK(cluster.node(r).stage().summary().at("peers_failed") == 2.0);
    }
  }
  SECTION("net.min_nodes = 4: any failure stops a node, naming the setting") {
    job.min_nodes = 4;
    InProcCluster cluster(job, "ako", 4);
    const auto errors = run_split(cluster, {3}, {0, 1, 2});
    for (std::size_t r = 0; r < 4; ++r) {
      INFO("rank " << r);
      REQUIRE(errors[r] != nullptr);
      CHECK_THAT(message_of(errors[r]),
                 Catch::StartsWith("too few nodes left") && Catch::Contains("net.min_nodes = 4"));
    }
  }
}

TEST_CASE("ako with momentum: each node's velocity is what travels, once to every replica",
          "[sync][ako][inproc]") {
  SyntheticJob job;
  job.sgd.momentum = 0.9f;
  job.sgd.weight_decay = 1e-3f;
  job.options.values.set("ako.partitions", std::int64_t{3});
  job.options.values.set("ako.staleness", std::int64_t{1});
  job.options.values.set("ako.final", std::string("fold"));
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
  job.options.values.set("ako.partitions", std::int64_t{3});
  job.options.values.set("ako.staleness", std::int64_t{2});
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

TEST_CASE(
    "ako with links of different speeds: per-link partitions follow the measured rates, "
    "and every gradient still reaches every replica once",
    "[sync][ako][inproc][links]") {
  // The start-up probe measured every link at R except those of rank 2, at R / 2. p = auto
  // (eq. 3 at a declared B): rank 0's and rank 1's links get p_i = ceil(eq3 x mean / r_i), the
  // one to rank 2 twice the other's count (up to the rounding up); rank 2's links are equal: p.
  const double rate = 100e6;
  sync::JobMeasurements measured;
  measured.links = topo::LinkMatrix::uniform(3, 1e-4, rate);
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 3; ++j) {
      if (i != j && (i == 2 || j == 2)) measured.links.bandwidth[i * 3 + j] = rate / 2;
    }
  }
  SyntheticJob job;
  job.layers = {"dense:256", "relu", "dense:4", "softmax_cross_entropy"};
  job.features = 64;  // m = 17,668 floats: p up to 128
  job.sgd.momentum = 0.0f;
  job.options.values.set("ako.partitions", std::string("auto"));  // eq. 3
  job.options.values.set("ako.bandwidth", 20e6);                  // B, bytes/s
  job.options.values.set("ako.staleness", std::int64_t{2});
  job.options.values.set("ako.final", std::string("fold"));  // every gradient applied everywhere
  job.measured = &measured;
  InProcCluster cluster(job, "ako", 3);
  // Warm-up, probe, then the final plan (the profiles take at least 3 s; bounded at 60 s).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    bool agreed = true;
    for (std::size_t r = 0; r < 3; ++r) {
      agreed = agreed && dynamic_cast<sync::AkoStage&>(cluster.node(r).stage()).partitions();
    }
    if (agreed) break;
    cluster.train(10);
  }
  cluster.train(400);  // rounds at the final plan
  cluster.finish();
  const double m_bytes = 17668.0 * sizeof(float);
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(testing::max_abs_difference(cluster.node(r).model().parameters(),
                                      cluster.node(0).model().parameters()) <= 1e-4);
    const auto summary = cluster.node(r).stage().summary();
    REQUIRE(summary.at("eq3") > 0);
    const double eq3 = summary.at("eq3");
    REQUIRE(summary.at("measured_seconds") > 0);  // at least 2 rounds at the final plan
    CHECK(cluster.node(r).stage().rejected_messages() == 0);
    std::vector<double> rates(3, 0.0);
    for (std::size_t peer = 0; peer < 3; ++peer) {
      if (peer != r) rates[peer] = measured.links.bandwidth[r * 3 + peer];
    }
    const auto expected =
        topo::link_partitions(eq3, static_cast<std::size_t>(summary.at("partitions")), rates, 128);
    for (std::size_t peer = 0; peer < 3; ++peer) {
      if (peer == r) continue;
      const double p_i = summary.at("link_partitions_" + std::to_string(peer));
      const double bytes = summary.at("link_round_bytes_" + std::to_string(peer));
      INFO("link to rank " << peer << ": p_i " << p_i << ", " << bytes << " bytes per round, eq3 "
                           << eq3 << ", rounds " << summary.at("rounds_sent") << ", measured over "
                           << summary.at("measured_seconds") << " s");
      CHECK(p_i == static_cast<double>(expected[peer]));
      // Each round carries one range of m / p_i floats to that peer.
      CHECK(bytes == Approx(m_bytes / p_i).epsilon(0.01));
    }
    if (r == 2) {
      CHECK(summary.at("link_partitions_0") == summary.at("partitions"));
      CHECK(summary.at("link_partitions_1") == summary.at("partitions"));
    } else {
      // The link at half the rate carries fewer bytes per round: 2 x the partitions (rounded up).
      const double fast = summary.at("link_partitions_" + std::to_string(1 - r));
      const double slow = summary.at("link_partitions_2");
      CHECK(slow >= 2 * fast - 1);
      CHECK(slow <= 2 * fast);
    }
  }
}
