// Tests for quorum rounds of strategy local (sync/local/quorum_rounds.h; issue 57, item 5): with
// a quorum of every node the synchronous rounds, a node that stops early or lags holding no one
// back with every Delta merged once, a failed peer dropped while the others go on, and the final
// model one model. In process, on the in-process transport.

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "sync/local/local_stage.h"
#include "tests/sync/support/inproc_cluster.h"

using namespace gradmesh;

namespace {

testing::SyntheticJob quorum_job(std::int64_t steps, std::int64_t quorum) {
  testing::SyntheticJob job;
  job.options.values.set("local.steps", steps);
  job.options.values.set("local.quorum", quorum);
  return job;
}

const sync::LocalStage& local_stage(testing::InProcCluster& cluster, std::size_t rank) {
  return dynamic_cast<const sync::LocalStage&>(cluster.node(rank).stage());
}

double figure(testing::InProcCluster& cluster, std::size_t rank, const std::string& name) {
  return local_stage(cluster, rank).summary().at(name);
}

}  // namespace

TEST_CASE("local with a quorum of every node is DiLoCo's synchronous rounds",
          "[sync][local][quorum][inproc]") {
  // Each merge takes one Delta from each node and every node waits for it; the mean is summed
  // in rank order at the leader instead of round a ring: the same up to float rounding.
  constexpr std::size_t kNodes = 3;
  testing::SyntheticJob ring = quorum_job(3, 3);
  ring.options.values.set("local.quorum", std::string("all"));
  testing::InProcCluster reference(ring, "local", kNodes);
  reference.train(10);  // 3 rounds, then 1 step into the 4th
  reference.finish();
  testing::InProcCluster quorum(quorum_job(3, 3), "local", kNodes);
  quorum.train_each({10, 10, 10}, true);
  const auto a = testing::replicas(reference);
  const auto b = testing::replicas(quorum);
  for (std::size_t r = 0; r < kNodes; ++r) {
    INFO("rank " << r);
    CHECK(b[r] == b[0]);  // one final model
    CHECK(testing::max_abs_difference(a[r], b[r]) <= 1e-5);
  }
  CHECK(figure(quorum, 0, "local_merges") == 3);
  CHECK(figure(quorum, 0, "local_merged_deltas") == 9);
  CHECK(figure(quorum, 0, "local_partial_merges") == 0);
  CHECK(figure(quorum, 0, "local_stale_deltas") == 0);
  CHECK(figure(quorum, 0, "local_final_deltas") == 0);
  CHECK(figure(quorum, 1, "local_merges") == 0);  // only the leader merges
}

TEST_CASE(
    "local with a quorum of 2 of 3: a node that stops early or lags holds no one back, every "
    "Delta is merged once, and the final model is one model",
    "[sync][local][quorum][inproc]") {
  constexpr std::size_t kNodes = 3;
  // A straggler that never catches up stops after 2 rounds while the others run 6 (with every
  // node's quorum they would wait for it forever): rank 2, or the leader itself, whose merges
  // go on on their own thread after its training ends.
  // ({5, 12, 4}: the leader ends 1 step into its third round, so rank 1's Deltas from then on
  // wait for the leader's end to shrink the quorum to the nodes still training.)
  const std::vector<std::vector<std::uint64_t>> schedules = {{12, 12, 4}, {4, 12, 12}, {5, 12, 4}};
  for (const double latency : {0.0, 0.02}) {
    for (const std::vector<std::uint64_t>& iterations : schedules) {
      INFO("rank 2's links delayed by " << latency << " s, iterations " << iterations[0] << ", "
                                        << iterations[1] << ", " << iterations[2]);
      testing::InProcCluster cluster(quorum_job(2, 2), "local", kNodes);
      for (std::size_t to = 0; to < 2; ++to) cluster.transport(2).set_link_latency(to, latency);
      const std::vector<std::uint64_t> ran = cluster.train_each(iterations, true);
      const auto w = testing::replicas(cluster);
      CHECK(w[1] == w[0]);
      CHECK(w[2] == w[0]);
      // Every Delta sent is merged exactly once: in a merge, or in the final one.
      std::uint64_t rounds = 0;
      for (const std::uint64_t i : ran) rounds += i / 2;  // a node told to end may stop early
      CHECK(figure(cluster, 0, "local_merged_deltas") + figure(cluster, 0, "local_final_deltas") ==
            static_cast<double>(rounds));
      CHECK(figure(cluster, 0, "local_merges") >= 1);
      CHECK(std::isfinite(figure(cluster, 0, "local_mean_staleness")));
      for (std::size_t r = 0; r < kNodes; ++r)
        CHECK(cluster.node(r).stage().rejected_messages() == 0);
    }
  }
}

TEST_CASE(
    "local with a quorum of 2 of 3: once 2 nodes have ended, a straggler that would train on "
    "ends at its next iteration, with one final model",
    "[sync][local][quorum][inproc]") {
  testing::InProcCluster cluster(quorum_job(2, 2), "local", 3);
  // Without the end the leader sends once 2 nodes have ended, rank 2 would train on for good.
  const std::vector<std::uint64_t> ran = cluster.train_each({6, 6, 1'000'000'000}, true);
  CHECK(ran[0] == 6);
  CHECK(ran[1] == 6);
  CHECK(ran[2] < 1'000'000'000);
  CHECK(cluster.node(2).stage().ended());
  const auto w = testing::replicas(cluster);
  CHECK(w[1] == w[0]);
  CHECK(w[2] == w[0]);
}

TEST_CASE(
    "local with quorum rounds of 3 of 3: a failed peer is dropped and the others go on to one "
    "final model, and the node cut off stops",
    "[sync][local][quorum][inproc][failure]") {
  constexpr std::size_t kNodes = 3;
  // A quorum of every node: the job ends for no one before all live nodes have ended, so rank 2
  // is still training whenever the cut comes.
  testing::InProcCluster cluster(quorum_job(2, 3), "local", kNodes);
  // Ranks 0 and 1 train 12 iterations and end; rank 2 would train on and on, and is cut from
  // both peers (a partition: it is 1 of 3, they are 2) while it does. Whenever the cut comes,
  // ranks 0 and 1 go on without it (the quorum then 2, the live nodes): their end waits for
  // rank 2's last Delta until it is dropped, and rank 2 stops at its next round's end, its
  // leader gone.
  std::exception_ptr error;
  std::thread training([&] {
    try {
      cluster.train_each({12, 12, 1'000'000'000}, true);
    } catch (...) {
      error = std::current_exception();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  cluster.transport(2).cut_link(0);
  cluster.transport(2).cut_link(1);
  training.join();
  REQUIRE(error);
  CHECK_THROWS_WITH(std::rethrow_exception(error), Catch::Contains("peer rank 0"));
  const auto w = testing::replicas(cluster);
  CHECK(w[1] == w[0]);
  CHECK(figure(cluster, 0, "peers_failed") == 1);
  CHECK(figure(cluster, 1, "peers_failed") == 1);
  CHECK_NOTHROW(cluster.node(0).stage().check_quorum());
  // Rank 2 lost its majority: it may write nothing for the job, and its end fails. Its training
  // ends at the first cut it sees (its leader's); the second reaches its membership on its own
  // delivery thread, so wait for it (bounded) before asking.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (figure(cluster, 2, "peers_failed") < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK_THROWS_WITH(cluster.node(2).stage().check_quorum(), Catch::Contains("majority"));
}

TEST_CASE("local's quorum is checked against the job and the options it cannot take yet",
          "[sync][local][quorum]") {
  CHECK_THROWS_WITH(testing::InProcCluster(quorum_job(2, 4), "local", 3),
                    Catch::Contains("sync.local.quorum = 4: more than the job's 3 nodes"));
  testing::SyntheticJob fragments = quorum_job(4, 2);
  fragments.options.values.set("local.fragments", std::int64_t{2});
  CHECK_THROWS_WITH(testing::InProcCluster(fragments, "local", 3),
                    Catch::Contains("sync.local.fragments"));
  testing::SyntheticJob overlap = quorum_job(4, 2);
  overlap.options.values.set("local.overlap", std::string("delayed"));
  CHECK_THROWS_WITH(testing::InProcCluster(overlap, "local", 3),
                    Catch::Contains("sync.local.overlap"));
  testing::SyntheticJob compressed = quorum_job(4, 2);
  compressed.options.values.set("compression.method", std::string("int8"));
  CHECK_THROWS_WITH(testing::InProcCluster(compressed, "local", 3),
                    Catch::Contains("sync.compression"));
  // Quorum rounds keep no checkpoints yet: the node refuses checkpoint.dir with the reason.
  testing::InProcCluster cluster(quorum_job(2, 2), "local", 3);
  CHECK_THAT(cluster.node(0).stage().checkpoint_refusal(), Catch::Contains("sync.local.quorum"));
  // One node: no rounds to hold a quorum in.
  testing::InProcCluster alone(quorum_job(2, 1), "local", 1);
  CHECK(alone.node(0).stage().checkpoint_refusal().empty());
}
