// A scheme added by a test alone (tests/sync/scheme/solo_scheme.h): registered at run time, priced
// by the planner through its cost function, built by PlanStage through the Scheme interface.

#include "tests/sync/scheme/solo_scheme.h"

#include <catch2/catch.hpp>

#include "apps/config/job_config.h"
#include "engine/error.h"
#include "sync/plan_input.h"
#include "sync/plan_stage.h"
#include "tests/sync/support/inproc_cluster.h"

using namespace gradmesh;
using gradmesh::testing::InProcCluster;
using gradmesh::testing::InProcNode;
using gradmesh::testing::SyntheticJob;

namespace {

constexpr std::uint64_t kIterations = 4;

void register_solo_once() {
  static const bool registered = [] {
    sync::register_scheme(testing::solo_entry());
    return true;
  }();
  (void)registered;
}

}  // namespace

TEST_CASE("a scheme registered by a test is planned, built and trained by PlanStage",
          "[sync][scheme][inproc]") {
  register_solo_once();
  SyntheticJob job;
  // The planner may use PS or solo; solo sends nothing, so it wins every layer by time.
  job.factory = [](sync::SyncContext c) -> std::unique_ptr<sync::SyncStage> {
    const topo::PlannerInput input = sync::planner_input(c, {"ps", "solo"});
    return std::make_unique<sync::PlanStage>(std::move(c), "solo-test", topo::make_plan(input));
  };
  constexpr std::size_t kNodes = 3;
  InProcCluster cluster(job, "auto", kNodes);
  for (const sync::LayerPlan& row : cluster.node(0).stage().plan()) {
    INFO("layer " << row.layer);
    if (row.parameters > 0) CHECK(row.scheme == "solo");
    CHECK(row.predicted_bytes_sent == 0);
  }
  cluster.train(kIterations);
  for (std::size_t r = 0; r < kNodes; ++r) {
    // What solo promises: each node is a single node trained on its own batches.
    SyntheticJob alone = job;
    alone.factory = nullptr;
    InProcNode single(alone, "none", 0, 1, nullptr, {r});
    for (std::uint64_t i = 0; i < kIterations; ++i) single.step();
    INFO("rank " << r);
    CHECK(testing::max_abs_difference(cluster.node(r).model().parameters(),
                                      single.model().parameters()) == 0);
    CHECK(cluster.transport(r).counters().bytes_sent == 0);
  }
  // Registered once: a second registration of the id is refused.
  CHECK_THROWS_AS(sync::register_scheme(testing::solo_entry()), ContractError);
}

TEST_CASE("a scheme's own option table is a table of the job config and reaches the scheme",
          "[sync][scheme][config]") {
  register_solo_once();
  // The job config knows nothing of solo: the registry hands it [sync.solo].
  const char* text = "[model]\nlayers = [\"dense:4\", \"softmax_cross_entropy\"]\n";
  const app::JobConfig defaults = app::parse_job_config(text, "job.toml", {});
  CHECK(defaults.sync.options.flag("solo.step"));
  CHECK_THAT(defaults.canonical_text(), Catch::Contains("[sync.solo]\nstep = true\n"));
  const app::JobConfig frozen =
      app::parse_job_config(std::string(text) + "[sync.solo]\nstep = false\n", "job.toml", {});
  CHECK_FALSE(frozen.sync.options.flag("solo.step"));
  CHECK(app::parse_job_config(text, "job.toml", {"sync.solo.step=false"}) == frozen);
  CHECK_THROWS_WITH(app::parse_job_config(text, "job.toml", {"sync.solo.step=3"}),
                    Catch::Contains("sync.solo.step = 3: expected true or false"));
  CHECK_THROWS_WITH(app::parse_job_config(text, "job.toml", {"sync.solo.stpe=false"}),
                    Catch::Contains("did you mean 'sync.solo.step'"));

  // step = false reaches the scheme through SyncContext::options: the layers stay as they began.
  SyntheticJob job;
  job.options.values = frozen.sync.options;
  job.factory = [](sync::SyncContext c) -> std::unique_ptr<sync::SyncStage> {
    const topo::PlannerInput input = sync::planner_input(c, {"solo"});
    return std::make_unique<sync::PlanStage>(std::move(c), "solo-test", topo::make_plan(input));
  };
  InProcCluster cluster(job, "auto", 2);
  const std::span<const float> now = cluster.node(0).model().parameters();
  const std::vector<float> before(now.begin(), now.end());
  cluster.train(kIterations);
  CHECK(testing::max_abs_difference(cluster.node(0).model().parameters(), before) == 0);
  CHECK(cluster.node(0).stage().plan()[0].scheme == "solo");
}
