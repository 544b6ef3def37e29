// Tests for apps/recovery/resume_point.h: the checkpoint a resumed node continues from (one node
// here; the agreement among several nodes is tested in tests/apps/node/resume_test.cpp).

#include "apps/recovery/resume_point.h"

#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "recovery_fixture.h"
#include "sync/lane_router.h"
#include "sync/sync_stage.h"

using gradmesh::CheckpointError;
using gradmesh::ConfigError;
using namespace gradmesh::app;
using gradmesh::app::testing::Counter;
using gradmesh::app::testing::TempDir;

namespace {

/// A stage of strategy `name` holding a counter, that records what prepare_resplit() was told.
class FakeStage final : public gradmesh::sync::SyncStage {
 public:
  explicit FakeStage(std::string name) : name_(std::move(name)) {}
  [[nodiscard]] std::string_view name() const noexcept override { return name_; }
  void build(gradmesh::engine::Graph&, const gradmesh::sync::IterationTasks&) override {}
  [[nodiscard]] std::vector<gradmesh::sync::LayerPlan> plan() const override { return {}; }
  void save_state(gradmesh::engine::StateWriter& out) override { counter.save_state(out); }
  void load_state(gradmesh::engine::StateReader& in) override { counter.load_state(in); }
  void prepare_resplit(std::size_t old_nodes, bool copied) override { told = {old_nodes, copied}; }
  Counter counter;
  std::optional<std::pair<std::size_t, bool>> told;

 private:
  std::string name_;
};

JobConfig config(const std::vector<std::string>& overrides = {}) {
  return parse_job_config("[model]\nlayers = [\"dense:10\", \"softmax_cross_entropy\"]\n",
                          "configs/x.toml", overrides);
}

/// Writes node `rank`'s checkpoint of `iteration` for a job of `nodes` under `config`: a cursor
/// (iterations done, iterations per epoch), an optimizer's velocity and a counter section.
void write(const std::filesystem::path& dir, std::size_t rank, std::size_t nodes,
           std::uint64_t iteration, std::uint64_t per_epoch, const JobConfig& c) {
  Counter counter;
  counter.value = iteration * 10 + rank;
  struct Cursor final : gradmesh::engine::Checkpointable {
    std::uint64_t done, per_epoch;
    Cursor(std::uint64_t d, std::uint64_t p) : done(d), per_epoch(p) {}
    void save_state(gradmesh::engine::StateWriter& out) override {
      out.write_u64(done);
      out.write_u64(per_epoch);
    }
    void load_state(gradmesh::engine::StateReader& in) override {
      done = in.read_u64();
      per_epoch = in.read_u64();
    }
  } position(iteration, per_epoch);
  gradmesh::app::testing::Floats velocity;
  velocity.values = {static_cast<float>(rank), 1.0f};
  CheckpointSet sections;
  sections.add("optimizer", velocity);
  sections.add("cursor", position);
  sections.add("counter", counter);
  sections.add("sync", counter);
  std::vector<std::byte> file;
  sections.save(CheckpointHeader{c.training_fingerprint(), rank, nodes, iteration, c.sync.strategy,
                                 c.training_text()},
                file);
  CheckpointStore(dir, rank, 10).save(iteration, file);
}

}  // namespace

TEST_CASE("a resume takes the newest checkpoint that verifies and fits the job",
          "[recovery][resume]") {
  TempDir dir("resume");
  gradmesh::sync::LaneRouter router(nullptr, 0, 1);
  gradmesh::sync::ResumeAgreement agreement(router, 5.0);
  const JobConfig c = config();
  write(dir.path, 0, 1, 100, 50, c);
  write(dir.path, 0, 1, 200, 50, c);
  write(dir.path, 0, 1, 300, 50, c);
  // The newest one is torn (cut short): skipped with a warning.
  const auto newest = CheckpointStore(dir.path, 0).path(300);
  std::filesystem::resize_file(newest, std::filesystem::file_size(newest) / 2);

  const ResumePoint point = agree_on_resume(dir.path, 0, 1, c, agreement);
  CHECK(point.checkpoint.header.iteration == 200);
  CHECK(point.source == CheckpointStore(dir.path, 0).path(200).string());
  CHECK(point.resplit_from_nodes == 0);
  CHECK(point.checkpoint.sections.contains("counter"));
}

TEST_CASE("a resume under another training config names the keys that changed",
          "[recovery][resume]") {
  TempDir dir("resume-config");
  gradmesh::sync::LaneRouter router(nullptr, 0, 1);
  gradmesh::sync::ResumeAgreement agreement(router, 5.0);
  write(dir.path, 0, 1, 100, 50, config());
  try {
    (void)agree_on_resume(dir.path, 0, 1, config({"optimizer.lr=0.5"}), agreement);
    FAIL("a changed optimizer.lr was accepted");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("optimizer.lr = ") && Catch::Contains("0.5"));
  }
}

TEST_CASE("a resume with no checkpoint names the folder", "[recovery][resume]") {
  TempDir dir("resume-none");
  gradmesh::sync::LaneRouter router(nullptr, 0, 1);
  gradmesh::sync::ResumeAgreement agreement(router, 5.0);
  try {
    (void)agree_on_resume(dir.path, 0, 1, config(), agreement);
    FAIL("resumed from nothing");
  } catch (const CheckpointError& e) {
    CHECK_THAT(e.what(), Catch::Contains(dir.path.string()));
  }
}

TEST_CASE("a two-node job's checkpoints re-split over one node, the cursor rescaled",
          "[recovery][resume]") {
  TempDir dir("resume-resplit");
  gradmesh::sync::LaneRouter router(nullptr, 0, 1);
  gradmesh::sync::ResumeAgreement agreement(router, 5.0);
  const JobConfig c = config();  // ps: BSP, may change the node count
  write(dir.path, 0, 2, 75, 50, c);
  write(dir.path, 1, 2, 75, 50, c);
  ResumePoint point = agree_on_resume(dir.path, 0, 1, c, agreement);
  CHECK(point.resplit_from_nodes == 2);
  CHECK(point.checkpoint.header.nodes == 1);
  // 75 of 50 per epoch is half-way through epoch 2: with 100 per epoch, iteration 150.
  FakeStage stage("ps");
  stage.counter.value = 7;
  adapt_resplit(point, 100, stage);
  gradmesh::engine::StateReader cursor(point.checkpoint.sections.at("cursor"), "cursor");
  CHECK(cursor.read_u64() == 150);
  CHECK(cursor.read_u64() == 100);
  gradmesh::engine::StateReader sync(point.checkpoint.sections.at("sync"), "sync");
  CHECK(sync.read_u64() == 7);  // this job's plan
  CHECK_FALSE(stage.told.has_value());
}

TEST_CASE(
    "local: a two-node job's checkpoints re-split over three nodes by replica, the new rank "
    "taking a copy of rank 0's",
    "[recovery][resume][local]") {
  TempDir dir("resume-resplit-local");
  const JobConfig c = config({"sync.strategy=local"});
  write(dir.path, 0, 2, 75, 50, c);
  write(dir.path, 1, 2, 75, 50, c);
  const auto counter_of = [](const Checkpoint& k, const std::string& section) {
    gradmesh::engine::StateReader in(k.sections.at(section), section);
    return in.read_u64();
  };
  const auto velocity_of = [](const Checkpoint& k) {
    gradmesh::engine::StateReader in(k.sections.at("optimizer"), "optimizer");
    return in.read_float_vector();
  };
  for (std::size_t rank : {1, 2}) {
    INFO("rank " << rank);
    gradmesh::sync::LaneRouter router(nullptr, 0, 1);
    gradmesh::sync::ResumeAgreement agreement(router, 5.0);
    ResumePoint point = agree_on_resume(dir.path, rank, 3, c, agreement);
    REQUIRE(point.resplit_from_nodes == 2);
    const std::size_t own = rank < 2 ? rank : 0;
    // The old rank's own sections, not merged (rank 0's velocity is {0, 1}, rank 1's {1, 1}).
    CHECK(velocity_of(point.checkpoint) == std::vector<float>{static_cast<float>(own), 1.0f});
    FakeStage stage("local");
    stage.counter.value = 7;
    adapt_resplit(point, 100, stage);
    CHECK(counter_of(point.checkpoint, "sync") == 750 + own);  // kept: the old rank's state
    CHECK(counter_of(point.checkpoint, "counter") == 750 + own);
    REQUIRE(stage.told.has_value());
    CHECK(stage.told->first == 2);
    CHECK(stage.told->second == (rank >= 2));  // a copy of rank 0's
    gradmesh::engine::StateReader cursor(point.checkpoint.sections.at("cursor"), "cursor");
    CHECK(cursor.read_u64() == 150);
  }
}
