// Tests for strategy local (sync/local/: local SGD with an outer optimizer, DiLoCo; issue 57):
// the outer optimizers against hand-computed steps, H = "auto" against its formula, H = 1 with
// averaging against BSP SGD on the union of the batches, H > 1 against a single-process
// simulation of the same rounds (with overlap: of the rounds with the outer step one round late),
// resume mid-round bit for bit, and the final model one model.

#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "sync/local/local_stage.h"
#include "sync/local/outer_optimizer.h"
#include "tests/sync/support/inproc_cluster.h"

using namespace gradmesh;

namespace {

testing::SyntheticJob local_job(std::int64_t steps, const std::string& outer,
                                const std::string& overlap = "off", std::int64_t fragments = 1) {
  testing::SyntheticJob job;
  job.options.values.set("local.steps", steps);
  job.options.values.set("local.outer", outer);
  job.options.values.set("local.overlap", overlap);
  job.options.values.set("local.fragments", fragments);
  return job;
}

/// The largest distance of `x` from the element-wise mean of `parts`, relative to 1 + |mean|.
double worst_from_mean(const std::vector<float>& x, const std::vector<std::vector<float>>& parts) {
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    double m = 0;
    for (const std::vector<float>& p : parts) m += p[i];
    m /= static_cast<double>(parts.size());
    worst = std::max(worst, std::fabs(x[i] - m) / (1.0 + std::fabs(m)));
  }
  return worst;
}

/// Whether `job` on `nodes` nodes, stopped after `stop` iterations and resumed, ends after
/// `total` (finished) with the replicas of the run that was not stopped, bit for bit. The
/// stopped run's states go into `saved`.
bool resumes_bit_for_bit(const testing::SyntheticJob& job, std::size_t nodes, std::size_t stop,
                         std::size_t total, std::vector<std::vector<std::byte>>& saved) {
  testing::InProcCluster through(job, "local", nodes);
  through.train(total);
  through.finish();
  return testing::resumed_replicas(job, "local", nodes, stop, total, true, &saved) ==
         testing::replicas(through);
}

/// The parameters `job` starts from (every node's).
std::vector<float> initial_parameters(const testing::SyntheticJob& job) {
  testing::InProcNode fresh(job, "none", 0, 1, nullptr, {0});
  const auto w = fresh.model().parameters();
  return {w.begin(), w.end()};
}

}  // namespace

TEST_CASE("local's outer optimizers step as written, on small vectors", "[sync][local]") {
  const std::vector<float> d1 = {1.0f, -2.0f, 0.5f}, d2 = {0.25f, 1.0f, -1.0f};
  SECTION("nesterov: v = mu v + d; theta -= lr (d + mu v)") {
    sync::OuterOptimizer outer(sync::OuterKind::kNesterov, 0.5, 0.9, 3);
    std::vector<float> theta = {10.0f, 20.0f, 30.0f};
    outer.step(theta, d1);  // v = d1; theta -= 0.5 (d1 + 0.9 d1)
    CHECK(theta[0] == Approx(10.0f - 0.5f * 1.9f * 1.0f));
    CHECK(theta[1] == Approx(20.0f + 0.5f * 1.9f * 2.0f));
    outer.step(theta, d2);  // v = 0.9 d1 + d2
    const float v0 = 0.9f * 1.0f + 0.25f;
    CHECK(theta[0] == Approx(10.0f - 0.95f - 0.5f * (0.25f + 0.9f * v0)));
    CHECK(outer.velocity()[0] == Approx(v0));
  }
  SECTION("sgd: v = mu v + d; theta -= lr v") {
    sync::OuterOptimizer outer(sync::OuterKind::kSgd, 0.5, 0.9, 3);
    std::vector<float> theta = {10.0f, 20.0f, 30.0f};
    outer.step(theta, d1);
    outer.step(theta, d2);
    CHECK(theta[2] == Approx(30.0f - 0.5f * 0.5f - 0.5f * (0.9f * 0.5f - 1.0f)));
  }
  SECTION("average: theta -= d, whatever lr and momentum say") {
    sync::OuterOptimizer outer(sync::OuterKind::kAverage, 0.7, 0.9, 3);
    std::vector<float> theta = {10.0f, 20.0f, 30.0f};
    outer.step(theta, d1);
    CHECK(theta == std::vector<float>{9.0f, 22.0f, 29.5f});
    CHECK(outer.velocity().empty());
  }
  SECTION("the velocity survives a checkpoint bit for bit") {
    sync::OuterOptimizer a(sync::OuterKind::kNesterov, 0.7, 0.9, 3);
    std::vector<float> theta = {1.0f, 2.0f, 3.0f};
    a.step(theta, d1);
    engine::StateWriter writer;
    a.save_state(writer);
    sync::OuterOptimizer b(sync::OuterKind::kNesterov, 0.7, 0.9, 3);
    engine::StateReader reader(writer.bytes(), "outer");
    b.load_state(reader);
    std::vector<float> ta = theta, tb = theta;
    a.step(ta, d2);
    b.step(tb, d2);
    CHECK(ta == tb);
  }
}

TEST_CASE("local's automatic H is the smallest at 95% utilization without overlap",
          "[sync][local]") {
  // H t_c / (H t_c + t_x) >= 0.95  <=>  H >= 19 t_x / t_c.
  CHECK(sync::local_steps_for(0.1, 0.5, 0.95, 10000) == 95);
  CHECK(sync::local_steps_for(0.1, 0.0, 0.95, 10000) == 1);  // one node: nothing to hide
  CHECK(sync::local_steps_for(0.2, 0.001, 0.95, 10000) == 1);
  CHECK(sync::local_steps_for(0.01, 100.0, 0.95, 10000) == 10000);  // capped
  const std::size_t h = sync::local_steps_for(0.03, 0.7, 0.95, 10000);
  const auto utilization = [](double steps, double tc, double tx) {
    return steps * tc / (steps * tc + tx);
  };
  CHECK(utilization(static_cast<double>(h), 0.03, 0.7) >= 0.95);
  CHECK(utilization(static_cast<double>(h - 1), 0.03, 0.7) < 0.95);
  // A slower link needs a longer round.
  CHECK(sync::local_steps_for(0.03, 7.0, 0.95, 10000) > h);
  CHECK_THROWS_AS(sync::local_steps_for(0.0, 1.0, 0.95, 100), ContractError);
  CHECK_THROWS_AS(sync::local_steps_for(0.1, 1.0, 1.0, 100), ContractError);
}

TEST_CASE("local's automatic H with overlap hides the exchange under a round's compute",
          "[sync][local]") {
  // H t_c / max(H t_c, t_x) >= 0.95  <=>  H >= 0.95 t_x / t_c: 5 where 95 without overlap.
  CHECK(sync::local_steps_for(0.1, 0.5, 0.95, 10000, true) == 5);
  CHECK(sync::local_steps_for(0.1, 0.0, 0.95, 10000, true) == 1);
  CHECK(sync::local_steps_for(0.01, 1000.0, 0.95, 10000, true) == 10000);  // capped
  for (const bool overlap : {false, true}) {
    INFO("overlap " << overlap);
    const std::size_t h = sync::local_steps_for(0.03, 0.7, 0.95, 10000, overlap);
    CHECK(sync::local_utilization(h, 0.03, 0.7, overlap) >= 0.95);
    CHECK(sync::local_utilization(h - 1, 0.03, 0.7, overlap) < 0.95);
  }
  CHECK(sync::local_utilization(10, 0.1, 0.5, true) == 1.0);  // hidden
  CHECK(sync::local_utilization(10, 0.1, 0.5, false) == Approx(1.0 / 1.5));
  CHECK(sync::local_utilization(1, 0.1, 0.0, false) == 1.0);
}

TEST_CASE("local with overlap equals the rounds simulated with the outer step one round late",
          "[sync][local][inproc]") {
  constexpr std::size_t kNodes = 2, kSteps = 3, kRounds = 3;
  constexpr float kInv = 1.0f / kNodes;
  for (const std::string kind : {"eager", "delayed"}) {
    INFO("overlap " << kind);
    const testing::SyntheticJob job = local_job(kSteps, "nesterov", kind);
    testing::InProcCluster cluster(job, "local", kNodes);
    // The reference (LocalStage's docs): each node's replica round_start[r] when a round starts,
    // its own Delta of the round before own[r], its outer optimizer outer[r] (eager); g the
    // global model and global_outer (delayed).
    std::vector<float> g;
    {
      testing::InProcNode fresh(job, "none", 0, 1, nullptr, {0});
      const auto w = fresh.model().parameters();
      g.assign(w.begin(), w.end());
    }
    const std::size_t n = g.size();
    std::vector<std::vector<float>> velocity(kNodes), round_start(kNodes, g), own(kNodes);
    std::vector<float> pending;
    const sync::OuterOptimizer fresh_outer(sync::OuterKind::kNesterov, 0.7, 0.9, n);
    std::vector<sync::OuterOptimizer> outer(kNodes, fresh_outer);
    sync::OuterOptimizer global_outer = fresh_outer;
    for (std::size_t round = 0; round < kRounds; ++round) {
      std::vector<std::vector<float>> delta(kNodes, std::vector<float>(n));
      for (std::size_t r = 0; r < kNodes; ++r) {
        const std::vector<float> end =
            testing::train_alone(job, r, round_start[r], velocity[r], round * kSteps, kSteps);
        for (std::size_t i = 0; i < n; ++i) delta[r][i] = round_start[r][i] - end[i];
      }
      if (kind == "delayed") {
        if (!pending.empty()) global_outer.step(g, pending);
        for (std::size_t r = 0; r < kNodes; ++r) round_start[r] = g;
      } else {
        for (std::size_t r = 0; r < kNodes; ++r) {
          std::vector<float> estimate(n);
          for (std::size_t i = 0; i < n; ++i) {
            const float others = pending.empty() ? 0.0f : pending[i] - own[r][i] * kInv;
            estimate[i] = delta[r][i] * kInv + others;
          }
          outer[r].step(round_start[r], estimate);
          own[r] = delta[r];
        }
      }
      pending.assign(n, 0.0f);
      for (std::size_t i = 0; i < n; ++i) pending[i] = (delta[0][i] + delta[1][i]) * kInv;
      cluster.train(kSteps);
      const auto replicas = testing::replicas(cluster);
      for (std::size_t r = 0; r < kNodes; ++r) CHECK(replicas[r] == round_start[r]);
      if (kind == "delayed") {
        CHECK(replicas[0] == replicas[1]);  // every node goes on from g
      } else {
        CHECK(replicas[0] != replicas[1]);  // each node's own change went in at once
      }
    }
    // finish(): the last exchange waited for, not applied; one model on every node, the
    // replicas' mean (delayed: they are g already).
    cluster.finish();
    const auto final_replicas = testing::replicas(cluster);
    CHECK(final_replicas[0] == final_replicas[1]);
    if (kind == "delayed") {
      CHECK(final_replicas[0] == g);
    } else {
      CHECK(worst_from_mean(final_replicas[0], round_start) <= 1e-6);
    }
  }
}

TEST_CASE("local with overlap \"eager\" on one node is DiLoCo on one node, bit for bit",
          "[sync][local][inproc]") {
  testing::InProcCluster eager(local_job(3, "nesterov", "eager"), "local", 1);
  testing::InProcCluster plain(local_job(3, "nesterov", "off"), "local", 1);
  eager.train(9);
  plain.train(9);
  CHECK(testing::replicas(eager)[0] == testing::replicas(plain)[0]);
}

TEST_CASE("local with H = 1 and outer average equals BSP SGD on the union of the batches",
          "[sync][local][inproc]") {
  for (const std::size_t nodes : {2, 3}) {
    INFO(nodes << " nodes");
    const testing::SyntheticJob job = local_job(1, "average");
    const std::vector<float> reference = testing::union_reference(job, nodes, 6);
    testing::InProcCluster cluster(job, "local", nodes);
    cluster.train(6);
    const auto replicas = testing::replicas(cluster);
    for (std::size_t r = 1; r < nodes; ++r) CHECK(replicas[r] == replicas[0]);
    // Momentum 0.9 included: the mean of the nodes' velocities follows BSP's velocity.
    CHECK(testing::max_abs_difference(replicas[0], reference) <= 1e-5);
  }
}

TEST_CASE("local with H = 3 and Nesterov equals the rounds simulated in one process",
          "[sync][local][inproc]") {
  constexpr std::size_t kNodes = 2, kSteps = 3, kRounds = 2;
  const testing::SyntheticJob job = local_job(kSteps, "nesterov");
  testing::InProcCluster cluster(job, "local", kNodes);
  // The reference: each node's inner steps alone, then the outer step on the mean change.
  std::vector<float> start;
  {
    testing::InProcNode fresh(job, "none", 0, 1, nullptr, {0});
    const auto w = fresh.model().parameters();
    start.assign(w.begin(), w.end());
  }
  std::vector<std::vector<float>> velocity(kNodes);
  sync::OuterOptimizer outer(sync::OuterKind::kNesterov, 0.7, 0.9, start.size());
  for (std::size_t round = 0; round < kRounds; ++round) {
    std::vector<float> sum(start.size(), 0.0f);
    std::vector<std::vector<float>> ends;
    for (std::size_t r = 0; r < kNodes; ++r) {
      ends.push_back(testing::train_alone(job, r, start, velocity[r], round * kSteps, kSteps));
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += start[i] - ends[r][i];
    }
    // Mid-round the replicas differ; at the round's end they are the outer step's, every bit.
    cluster.train(kSteps - 1);
    const auto mid = testing::replicas(cluster);
    CHECK(mid[0] != mid[1]);
    cluster.train(1);
    std::vector<float> mean(sum.size());
    for (std::size_t i = 0; i < sum.size(); ++i) mean[i] = sum[i] * (1.0f / kNodes);
    outer.step(start, mean);
    const auto replicas = testing::replicas(cluster);
    CHECK(replicas[0] == start);
    CHECK(replicas[1] == start);
  }
}

TEST_CASE("local: a job ending mid-round ends with one model, the replicas' mean",
          "[sync][local][inproc]") {
  const testing::SyntheticJob job = local_job(4, "nesterov");
  testing::InProcCluster cluster(job, "local", 3);
  cluster.train(6);  // one round and 2 inner steps
  const auto before = testing::replicas(cluster);
  CHECK(before[0] != before[1]);
  cluster.finish();
  const auto after = testing::replicas(cluster);
  CHECK(after[1] == after[0]);
  CHECK(after[2] == after[0]);
  CHECK(worst_from_mean(after[0], before) <= 1e-6);
}

TEST_CASE("local: stopped mid-round and resumed equals the uninterrupted run, bit for bit",
          "[sync][local][inproc]") {
  constexpr std::size_t kNodes = 2;
  const testing::SyntheticJob job = local_job(3, "nesterov");
  testing::InProcCluster through(job, "local", kNodes);
  through.train(8);
  // The same job stopped after 5 iterations (2 into the second round): each node's model,
  // optimizer and stage saved, then loaded by a new cluster that goes on from iteration 5.
  std::vector<std::vector<std::byte>> saved;
  const auto b = testing::resumed_replicas(job, "local", kNodes, 5, 8, false, &saved);
  const auto a = testing::replicas(through);
  for (std::size_t r = 0; r < kNodes; ++r) CHECK(a[r] == b[r]);
  // Another H refuses the checkpoint, naming the key.
  testing::InProcCluster other(local_job(4, "nesterov"), "local", kNodes);
  CHECK_THROWS_WITH(testing::load_nodes(other, saved), Catch::Contains("sync.local.steps"));
}

TEST_CASE("local with overlap: stopped with an exchange in flight and resumed, bit for bit",
          "[sync][local][inproc]") {
  constexpr std::size_t kNodes = 2;
  for (const std::string kind : {"eager", "delayed"}) {
    for (const std::size_t stop : {std::size_t{5}, std::size_t{6}}) {  // mid-round, at its end
      INFO("overlap " << kind << ", stopped after " << stop << " iterations");
      // The save waits for the exchange in flight and keeps its mean.
      std::vector<std::vector<std::byte>> saved;
      CHECK(resumes_bit_for_bit(local_job(3, "nesterov", kind), kNodes, stop, 10, saved));
      // Without overlap the checkpoint is refused, naming the key.
      testing::InProcCluster other(local_job(3, "nesterov", "off"), "local", kNodes);
      CHECK_THROWS_WITH(testing::load_nodes(other, saved), Catch::Contains("sync.local.overlap"));
    }
  }
}

TEST_CASE("local: its options are checked, and its plan and summary say H", "[sync][local]") {
  sync::OptionValues values;
  CHECK(values.is("local.steps", "auto"));
  CHECK_THROWS_AS(values.set("local.steps", std::int64_t{0}), std::invalid_argument);
  CHECK_THROWS_AS(values.set("local.outer", std::string("adam")), std::invalid_argument);
  CHECK_THROWS_AS(values.set("local.outer_lr", 0.0), std::invalid_argument);
  CHECK_THROWS_AS(values.set("local.outer_momentum", 1.0), std::invalid_argument);
  values.set("local.outer_lr", std::int64_t{1});
  CHECK(sync::local_options(values).outer_lr == 1.0);
  const sync::LocalOptions d = sync::local_options(sync::OptionValues{});
  CHECK(!d.steps);
  CHECK(d.outer == sync::OuterKind::kNesterov);
  CHECK(d.outer_lr == 0.7);
  CHECK(d.outer_momentum == 0.9);
  CHECK(d.overlap == sync::OverlapKind::kOff);
  CHECK_THROWS_AS(values.set("local.overlap", std::string("always")), std::invalid_argument);

  testing::InProcCluster cluster(local_job(5, "sgd"), "local", 2);
  const auto plan = cluster.node(0).stage().plan();
  REQUIRE(!plan.empty());
  CHECK(plan[0].scheme == "local H=5, sgd");
  CHECK(plan[0].predicted_bytes_sent > 0);
  const auto summary = cluster.node(0).stage().summary();
  CHECK(summary.at("local_steps") == 5);
  CHECK(summary.at("local_auto") == 0);
}

TEST_CASE("local with fragments equals the staggered rounds simulated in one process",
          "[sync][local][inproc]") {
  // H = 6 in F = 3 fragments: fragment p (floats p m / 3 to (p + 1) m / 3) is exchanged at inner
  // steps 2, 4 and 6 of each round, each with its own outer optimizer (LocalStage's docs).
  constexpr std::size_t kNodes = 2, kSteps = 6, kFragments = 3, kRounds = 2;
  constexpr float kInv = 1.0f / kNodes;
  for (const std::string overlap : {"off", "delayed"}) {
    INFO("overlap " << overlap);
    const testing::SyntheticJob job = local_job(kSteps, "nesterov", overlap, kFragments);
    testing::InProcCluster cluster(job, "local", kNodes);
    std::vector<float> g = initial_parameters(job);
    const std::size_t n = g.size();
    std::vector<std::vector<float>> w(kNodes, g), round_start(kNodes, g), velocity(kNodes);
    std::vector<sync::OuterOptimizer> outer;
    std::vector<std::size_t> begin, end;
    for (std::size_t p = 0; p < kFragments; ++p) {
      begin.push_back(p * n / kFragments);
      end.push_back((p + 1) * n / kFragments);
      outer.emplace_back(sync::OuterKind::kNesterov, 0.7, 0.9, end[p] - begin[p]);
    }
    // Delayed: the mean Delta of the fragment exchanged last, applied at the next point.
    std::vector<float> pending;
    std::size_t pending_fragment = kFragments;
    std::uint64_t done = 0;
    for (std::size_t round = 0; round < kRounds; ++round) {
      for (std::size_t p = 0; p < kFragments; ++p) {
        const std::size_t steps = kSteps / kFragments;
        for (std::size_t r = 0; r < kNodes; ++r) {
          w[r] = testing::train_alone(job, r, w[r], velocity[r], done, steps);
        }
        done += steps;
        std::vector<float> mean(end[p] - begin[p]);
        const std::span<float> gp = std::span(g).subspan(begin[p], end[p] - begin[p]);
        if (overlap == "off") {
          for (std::size_t k = 0; k < mean.size(); ++k) {
            const std::size_t i = begin[p] + k;
            mean[k] = ((g[i] - w[0][i]) + (g[i] - w[1][i])) * kInv;
          }
          outer[p].step(gp, mean);
          for (std::size_t r = 0; r < kNodes; ++r) {
            std::copy(gp.begin(), gp.end(), w[r].begin() + static_cast<std::ptrdiff_t>(begin[p]));
          }
        } else {
          if (pending_fragment < kFragments) {
            const std::size_t q = pending_fragment;
            const std::span<float> gq = std::span(g).subspan(begin[q], end[q] - begin[q]);
            const std::vector<float> old(gq.begin(), gq.end());
            outer[q].step(gq, pending);
            for (std::size_t k = 0; k < gq.size(); ++k) {
              const float shift = gq[k] - old[k];
              for (std::size_t r = 0; r < kNodes; ++r) {
                w[r][begin[q] + k] += shift;
                round_start[r][begin[q] + k] += shift;
              }
            }
          }
          for (std::size_t k = 0; k < mean.size(); ++k) {
            const std::size_t i = begin[p] + k;
            mean[k] = ((round_start[0][i] - w[0][i]) + (round_start[1][i] - w[1][i])) * kInv;
            for (std::size_t r = 0; r < kNodes; ++r) w[r][i] = round_start[r][i] = g[i];
          }
          pending = mean;
          pending_fragment = p;
        }
        cluster.train(steps);
        const auto replicas = testing::replicas(cluster);
        for (std::size_t r = 0; r < kNodes; ++r) REQUIRE(replicas[r] == w[r]);
        // The fragment just exchanged is the same bits on every node; the others differ.
        CHECK(std::equal(replicas[0].begin() + static_cast<std::ptrdiff_t>(begin[p]),
                         replicas[0].begin() + static_cast<std::ptrdiff_t>(end[p]),
                         replicas[1].begin() + static_cast<std::ptrdiff_t>(begin[p])));
        CHECK(replicas[0] != replicas[1]);
      }
    }
    // finish(): one model, the replicas' mean (the fragments never agree all at once).
    cluster.finish();
    const auto final_replicas = testing::replicas(cluster);
    CHECK(final_replicas[0] == final_replicas[1]);
    CHECK(worst_from_mean(final_replicas[0], w) <= 1e-6);
  }
}

TEST_CASE("local with one fragment is local as it was, and more send the same bytes a round",
          "[sync][local][inproc]") {
  testing::InProcCluster one(local_job(4, "nesterov", "off", 1), "local", 2);
  testing::InProcCluster three(local_job(4, "nesterov", "off", 3), "local", 2);
  const auto s1 = one.node(0).stage().summary();
  const auto s3 = three.node(0).stage().summary();
  CHECK(s1.at("local_fragments") == 1);
  CHECK(s3.at("local_fragments") == 3);
  // Three exchanges of a third of the model a round: the payload of one of all of it, plus the
  // frames of two more rings (2 (n - 1) messages each, a frame under 128 bytes), over H = 4
  // iterations; and more seconds (three rings' latencies).
  CHECK(s3.at("predicted_bytes_sent") >= s1.at("predicted_bytes_sent"));
  CHECK(s3.at("predicted_bytes_sent") <= s1.at("predicted_bytes_sent") + 2 * 2 * 128 / 4.0);
  CHECK(s3.at("local_exchange_seconds") > s1.at("local_exchange_seconds"));
  CHECK(three.node(0).stage().plan()[0].scheme == "local H=4, nesterov, 3 fragments");
}

TEST_CASE("local with fragments: stopped and resumed bit for bit, another F refused",
          "[sync][local][inproc]") {
  constexpr std::size_t kNodes = 2;
  for (const std::string overlap : {"off", "delayed"}) {
    for (const std::size_t stop : {std::size_t{3}, std::size_t{4}, std::size_t{6}}) {
      INFO("overlap " << overlap << ", stopped after " << stop << " iterations");
      std::vector<std::vector<std::byte>> saved;
      CHECK(resumes_bit_for_bit(local_job(4, "nesterov", overlap, 2), kNodes, stop, 11, saved));
      testing::InProcCluster other(local_job(4, "nesterov", overlap, 1), "local", kNodes);
      CHECK_THROWS_WITH(testing::load_nodes(other, saved),
                        Catch::Contains("sync.local.fragments = 2"));
    }
  }
}

TEST_CASE("local's fragments are refused past H and with eager updates", "[sync][local]") {
  CHECK_THROWS_WITH(testing::InProcCluster(local_job(2, "nesterov", "off", 3), "local", 2),
                    Catch::Contains("sync.local.fragments = 3: at most H = 2"));
  CHECK_THROWS_WITH(testing::InProcCluster(local_job(4, "nesterov", "eager", 2), "local", 2),
                    Catch::Contains("\"eager\""));
  sync::OptionValues values;
  CHECK_THROWS_AS(values.set("local.fragments", std::int64_t{0}), std::invalid_argument);
  CHECK(sync::local_options(values).fragments == 1);
}

TEST_CASE("local with steps = auto resumes a checkpoint of another H with that H, bit for bit",
          "[sync][local][inproc]") {
  // A re-split or a new probe may choose another H than the job that wrote the checkpoint: the
  // round under way ends where it would have. A fixed H must still match (the test above).
  constexpr std::size_t kNodes = 2;
  const testing::SyntheticJob fixed = local_job(3, "nesterov");
  testing::InProcCluster through(fixed, "local", kNodes);
  through.train(8);
  std::vector<std::vector<std::byte>> saved;
  {
    testing::InProcCluster first(fixed, "local", kNodes);
    first.train(5);
    saved = testing::save_nodes(first);
  }
  testing::SyntheticJob automatic = fixed;
  automatic.options.values.set("local.steps", std::string("auto"));
  automatic.first_iteration = 5;
  testing::InProcCluster resumed(automatic, "local", kNodes);
  const auto& stage = dynamic_cast<const sync::LocalStage&>(resumed.node(0).stage());
  REQUIRE(stage.schedule().automatic);
  REQUIRE(stage.schedule().steps != 3);  // else this test would show nothing
  testing::load_nodes(resumed, saved);
  CHECK(stage.schedule().steps == 3);
  resumed.train(3);
  CHECK(testing::replicas(resumed) == testing::replicas(through));
}
