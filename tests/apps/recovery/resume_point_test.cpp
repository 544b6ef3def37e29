// Tests for apps/recovery/resume_point.h: the checkpoint a resumed node continues from (one node
// here; the agreement among several nodes is tested in tests/apps/node/resume_test.cpp).

#include "apps/recovery/resume_point.h"

#include <fstream>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "recovery_fixture.h"
#include "sync/lane_router.h"

using gradmesh::CheckpointError;
using gradmesh::ConfigError;
using namespace gradmesh::app;
using gradmesh::app::testing::Counter;
using gradmesh::app::testing::TempDir;

namespace {

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
  Counter stage;
  stage.value = 7;
  adapt_resplit(point, 100, stage);
  gradmesh::engine::StateReader cursor(point.checkpoint.sections.at("cursor"), "cursor");
  CHECK(cursor.read_u64() == 150);
  CHECK(cursor.read_u64() == 100);
  gradmesh::engine::StateReader sync(point.checkpoint.sections.at("sync"), "sync");
  CHECK(sync.read_u64() == 7);
}
