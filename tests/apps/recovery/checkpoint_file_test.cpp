// Tests for apps/recovery/checkpoint_file.h: a node's checkpoint file (header, sections, crc)
// and its store on disk.

#include "apps/recovery/checkpoint_file.h"

#include <fstream>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "recovery_fixture.h"

using gradmesh::CheckpointError;
using gradmesh::ContractError;
using namespace gradmesh::app;
using gradmesh::app::testing::TempDir;

namespace {

/// A stateful object of every value kind the writer has.
struct Thing final : Checkpointable {
  std::uint64_t counter = 0;
  double rate = 0;
  std::vector<float> weights;
  std::vector<std::uint64_t> clocks;
  std::vector<double> times;
  std::string label;
  void save_state(StateWriter& out) override {
    out.write_u64(counter);
    out.write_f64(rate);
    out.write_floats(weights);
    out.write_u64s(clocks);
    out.write_f64s(times);
    out.write_string(label);
  }
  void load_state(StateReader& in) override {
    counter = in.read_u64();
    rate = in.read_f64();
    in.read_floats(weights);
    clocks = in.read_u64s();
    times = in.read_f64s();
    label = in.read_string();
  }
};

CheckpointHeader header(std::uint64_t iteration) {
  return CheckpointHeader{0x1234'5678'9abc'def0ULL, 1, 3, iteration, "ps", "optimizer.lr = 0.05\n"};
}

std::vector<std::byte> encoded(Thing& thing, std::uint64_t iteration) {
  CheckpointSet set;
  set.add("thing", thing);
  std::vector<std::byte> file;
  set.save(header(iteration), file);
  return file;
}

}  // namespace

TEST_CASE("a checkpoint round-trips every value kind and the header", "[recovery][checkpoint]") {
  Thing a;
  a.counter = 41;
  a.rate = -0.125;
  a.weights = {1.5f, -0.0f, 3e-38f, 7.0f};
  a.clocks = {3, 1, 4};
  a.times = {1e-6, 2.5};
  a.label = "layer \"dense0\"\n";
  const auto file = encoded(a, 40);
  const Checkpoint c = decode_checkpoint(file, "mem");
  CHECK(c.header == header(40));
  REQUIRE(c.sections.size() == 1);

  Thing b;
  b.weights.assign(4, 0.0f);
  CheckpointSet set;
  set.add("thing", b);
  set.load(c, "mem");
  CHECK(b.counter == 41);
  CHECK(b.rate == -0.125);
  CHECK(b.weights == a.weights);
  CHECK(std::signbit(b.weights[1]));
  CHECK(b.clocks == a.clocks);
  CHECK(b.times == a.times);
  CHECK(b.label == a.label);
}

TEST_CASE("a checkpoint that does not fit the state is refused naming the section",
          "[recovery][checkpoint]") {
  Thing a;
  a.weights = {1, 2, 3};
  const Checkpoint c = decode_checkpoint(encoded(a, 1), "f.gmckpt");
  Thing wrong_size;
  wrong_size.weights.assign(5, 0.0f);
  CheckpointSet set;
  set.add("thing", wrong_size);
  CHECK_THROWS_WITH(set.load(c, "f.gmckpt"), Catch::Contains("f.gmckpt, section 'thing'") &&
                                                 Catch::Contains("holds 3 floats, this job has 5"));

  Thing other;
  CheckpointSet missing;
  missing.add("other", other);
  CHECK_THROWS_WITH(missing.load(c, "f.gmckpt"), Catch::Contains("section 'thing'"));
  CheckpointSet both;
  Thing t;
  t.weights.assign(3, 0.0f);
  both.add("thing", t);
  both.add("other", other);
  CHECK_THROWS_WITH(both.load(c, "f.gmckpt"), Catch::Contains("no section 'other'"));
  CHECK_THROWS_AS(both.add("thing", other), ContractError);
}

TEST_CASE("torn, corrupt and foreign checkpoint files are refused naming why",
          "[recovery][checkpoint]") {
  Thing a;
  a.weights.assign(100, 0.5f);
  const auto file = encoded(a, 7);
  auto torn = file;
  torn.resize(torn.size() / 2);
  CHECK_THROWS_WITH(decode_checkpoint(torn, "t"), Catch::Contains("t: torn"));
  auto flipped = file;
  flipped[flipped.size() / 2] ^= std::byte{0x10};
  CHECK_THROWS_WITH(decode_checkpoint(flipped, "c"), Catch::Contains("c: corrupt: stored crc32"));
  auto version = file;
  version[8] = std::byte{99};
  CHECK_THROWS_WITH(decode_checkpoint(version, "v"), Catch::Contains("format version 99"));
  CHECK_THROWS_WITH(decode_checkpoint(std::vector<std::byte>(10), "z"),
                    Catch::Contains("not a gradmesh checkpoint"));
  auto longer = file;
  longer.push_back(std::byte{0});
  CHECK_THROWS_AS(decode_checkpoint(longer, "l"), CheckpointError);
}

TEST_CASE("the store writes atomically, keeps the newest and skips a torn newest file",
          "[recovery][checkpoint]") {
  TempDir dir("store");
  CheckpointStore store(dir.path, 2, /*keep=*/2);
  CHECK(store.iterations().empty());
  Thing a;
  a.weights.assign(10, 1.0f);
  for (std::uint64_t it : {10, 20, 30}) {
    a.counter = it;
    store.save(it, encoded(a, it));
  }
  CHECK(store.node_dir() == dir.path / "node-2");
  CHECK(store.iterations() == std::vector<std::uint64_t>{30, 20});  // keep = 2
  CHECK_FALSE(std::filesystem::exists(store.path(30).string() + ".tmp"));

  // A crash mid-write of the newest file: torn (no rename happened would leave a .tmp only;
  // a torn file under the final name is what a non-atomic writer or a bad disk leaves).
  std::filesystem::resize_file(store.path(30), std::filesystem::file_size(store.path(30)) - 9);
  std::ofstream(store.path(40).string() + ".tmp") << "half a file";  // an interrupted write
  std::vector<std::string> problems;
  CHECK(store.valid_iterations(problems) == std::vector<std::uint64_t>{20});
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0], Catch::Contains("ckpt-000000000030.gmckpt") && Catch::Contains("torn"));
  const Checkpoint c = store.load(20);
  CHECK(c.header.iteration == 20);
  CHECK_THROWS_WITH(store.load(30), Catch::Contains("torn"));
  CHECK_THROWS_WITH(store.load(99),
                    Catch::Contains("cannot open") && Catch::Contains("ckpt-000000000099.gmckpt"));
}

TEST_CASE("a write into a missing folder fails naming the path", "[recovery][checkpoint]") {
  const std::vector<std::byte> bytes(4);
  CHECK_THROWS_WITH(write_file_atomically("/nonexistent-gradmesh/x/ckpt", bytes),
                    Catch::Contains("/nonexistent-gradmesh/x/ckpt.tmp"));
}
