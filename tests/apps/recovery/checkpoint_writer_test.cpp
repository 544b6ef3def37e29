// Tests for apps/recovery/checkpoint_writer.h: a node's checkpoints saved at a boundary and
// written in the background, one at a time.

#include "apps/recovery/checkpoint_writer.h"

#include <fstream>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "recovery_fixture.h"

using gradmesh::CheckpointError;
using namespace gradmesh::app;
using gradmesh::app::testing::Counter;
using gradmesh::app::testing::TempDir;

namespace {

CheckpointHeader header() {
  return CheckpointHeader{0xfeed'beefULL, 0, 1, 0, "ps", "optimizer.lr = 0.1\n"};
}

}  // namespace

TEST_CASE("a checkpoint is saved at once and written in the background, the newest kept",
          "[recovery][checkpoint]") {
  TempDir dir("writer");
  Counter counter;
  CheckpointSet sections;
  sections.add("counter", counter);
  CheckpointWriter writer(CheckpointStore(dir.path, 0, 2), header());
  CHECK(writer.finish() == 0.0);  // nothing under way

  for (std::uint64_t iteration : {10, 20, 30}) {
    counter.value = iteration;
    counter.weights = {1.0f, 2.0f, static_cast<float>(iteration)};
    const CheckpointWriter::Saved saved = writer.save(iteration, sections);
    CHECK(saved.bytes > 3 * sizeof(float) + sizeof(std::uint64_t));
    CHECK(saved.seconds >= 0.0);
    // The state is a copy already: changing it now changes nothing on disk.
    counter.value = 999;
    counter.weights[0] = -1.0f;
  }
  CHECK(writer.finish() >= 0.0);
  CHECK(writer.finish() == 0.0);  // waited for once

  // keep = 2: the two newest, each with the iteration and state of its save.
  REQUIRE(writer.store().iterations() == std::vector<std::uint64_t>{30, 20});
  const Checkpoint newest = writer.store().load(30);
  CHECK(newest.header.iteration == 30);
  CHECK(newest.header.strategy == header().strategy);
  Counter loaded;
  loaded.weights.resize(3);
  CheckpointSet reader;
  reader.add("counter", loaded);
  reader.load(newest, "ckpt 30");
  CHECK(loaded.value == 30);
  CHECK(loaded.weights == std::vector<float>{1.0f, 2.0f, 30.0f});
}

TEST_CASE("a write that fails is rethrown by the next save or finish, naming the path",
          "[recovery][checkpoint]") {
  TempDir dir("writer-fails");
  // A regular file where the node's folder would be: the write cannot create it.
  std::ofstream(dir.path / "node-0") << "in the way";
  Counter counter;
  CheckpointSet sections;
  sections.add("counter", counter);
  CheckpointWriter writer(CheckpointStore(dir.path, 0, 2), header());
  (void)writer.save(5, sections);  // the write fails in the background
  try {
    (void)writer.finish();
    FAIL("finish() did not rethrow the write's error");
  } catch (const CheckpointError& e) {
    CHECK_THAT(e.what(), Catch::Contains("node-0"));
  }
}
