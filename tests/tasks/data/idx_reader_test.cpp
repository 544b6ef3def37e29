#include "tasks/data/idx_reader.h"

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "tests/tasks/data/idx_test_files.h"

namespace gradmesh::tasks {
namespace {

using testing::idx_bytes;
using testing::pattern;
using testing::TempDir;

// Runs f, requires a DataError, and returns its message.
template <typename F>
std::string data_error_message(F&& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  FAIL("expected gradmesh::DataError");
  return {};
}

}  // namespace

TEST_CASE("IDX images round-trip exactly (raw and gzipped)", "[tasks][idx]") {
  TempDir dir;
  const auto pixels = pattern(3 * 2 * 4);
  const auto bytes = idx_bytes(kIdxImagesMagic, {3, 2, 4}, pixels);
  const bool gz = GENERATE(false, true);
  const auto path = dir.path() / (gz ? "img.gz" : "img");
  gz ? testing::write_gz(path, bytes) : testing::write_raw(path, bytes);

  const IdxImages images = read_idx_images(path);
  CHECK(images.count == 3);
  CHECK(images.rows == 2);
  CHECK(images.cols == 4);
  REQUIRE(images.pixels.size() == pixels.size());
  for (std::size_t i = 0; i < pixels.size(); ++i) {
    CHECK(images.pixels[i] == static_cast<float>(pixels[i]) / 255.0f);
  }
}

TEST_CASE("IDX labels round-trip exactly (raw and gzipped)", "[tasks][idx]") {
  TempDir dir;
  const std::vector<std::uint8_t> labels = {0, 9, 3, 3, 7};
  const auto bytes = idx_bytes(kIdxLabelsMagic, {5}, labels);
  const bool gz = GENERATE(false, true);
  const auto path = dir.path() / (gz ? "lab.gz" : "lab");
  gz ? testing::write_gz(path, bytes) : testing::write_raw(path, bytes);
  CHECK(read_idx_labels(path) == labels);
}

TEST_CASE("IDX wrong magic names the path and both magics", "[tasks][idx]") {
  TempDir dir;
  const auto path = dir.path() / "labels-as-images";
  testing::write_raw(path, idx_bytes(kIdxLabelsMagic, {4}, pattern(4)));
  const std::string msg = data_error_message([&] { (void)read_idx_images(path); });
  CHECK_THAT(msg, Catch::Contains(path.string()));
  CHECK_THAT(msg, Catch::Contains("magic"));
  CHECK_THAT(msg, Catch::Contains("0x00000803"));
  CHECK_THAT(msg, Catch::Contains("0x00000801"));

  const auto path2 = dir.path() / "images-as-labels.gz";
  testing::write_gz(path2, idx_bytes(kIdxImagesMagic, {1, 1, 1}, pattern(1)));
  const std::string msg2 = data_error_message([&] { (void)read_idx_labels(path2); });
  CHECK_THAT(msg2, Catch::Contains(path2.string()));
  CHECK_THAT(msg2, Catch::Contains("magic"));
}

TEST_CASE("IDX truncated payload says expected vs got", "[tasks][idx]") {
  TempDir dir;
  const bool gz = GENERATE(false, true);
  const auto path = dir.path() / (gz ? "short.gz" : "short");
  auto bytes = idx_bytes(kIdxImagesMagic, {3, 2, 4}, pattern(10));  // 24 pixel bytes promised
  gz ? testing::write_gz(path, bytes) : testing::write_raw(path, bytes);
  const std::string msg = data_error_message([&] { (void)read_idx_images(path); });
  CHECK_THAT(msg, Catch::Contains(path.string()));
  CHECK_THAT(msg, Catch::Contains("truncated"));
  CHECK_THAT(msg, Catch::Contains("expected 24"));
  CHECK_THAT(msg, Catch::Contains("got 10"));

  const auto lpath = dir.path() / "short-labels";
  testing::write_raw(lpath, idx_bytes(kIdxLabelsMagic, {100}, pattern(7)));
  const std::string lmsg = data_error_message([&] { (void)read_idx_labels(lpath); });
  CHECK_THAT(lmsg, Catch::Contains(lpath.string()));
  CHECK_THAT(lmsg, Catch::Contains("expected 100"));
  CHECK_THAT(lmsg, Catch::Contains("got 7"));
}

TEST_CASE("IDX truncated header and truncated gzip stream", "[tasks][idx]") {
  TempDir dir;
  const auto path = dir.path() / "header";
  testing::write_raw(path, {0x00, 0x00, 0x08});
  CHECK_THAT(data_error_message([&] { (void)read_idx_labels(path); }),
             Catch::Contains(path.string()));

  // A gzip stream cut in the middle: zlib reports it, we name the file.
  const auto gz_path = dir.path() / "cut.gz";
  const auto full = dir.path() / "full.gz";
  testing::write_gz(full, idx_bytes(kIdxImagesMagic, {50, 8, 8}, pattern(50 * 64, 97)));
  std::ifstream in(full, std::ios::binary);
  std::vector<char> gz_bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  std::vector<std::uint8_t> cut(
      gz_bytes.begin(), gz_bytes.begin() + static_cast<std::ptrdiff_t>(gz_bytes.size() / 2));
  testing::write_raw(gz_path, cut);
  CHECK_THAT(data_error_message([&] { (void)read_idx_images(gz_path); }),
             Catch::Contains(gz_path.string()));
}

TEST_CASE("IDX absurd dimensions are refused", "[tasks][idx]") {
  TempDir dir;
  const auto path = dir.path() / "absurd";
  testing::write_raw(path, idx_bytes(kIdxImagesMagic, {1, 0, 28}, {}));
  const std::string msg = data_error_message([&] { (void)read_idx_images(path); });
  CHECK_THAT(msg, Catch::Contains(path.string()));
  CHECK_THAT(msg, Catch::Contains("absurd"));
  const auto huge = dir.path() / "huge";
  testing::write_raw(huge, idx_bytes(kIdxImagesMagic, {0xFFFFFFFFU, 16384, 16384}, {}));
  CHECK_THAT(data_error_message([&] { (void)read_idx_images(huge); }), Catch::Contains("absurd"));
}

TEST_CASE("IDX missing file names the path", "[tasks][idx]") {
  TempDir dir;
  const auto path = dir.path() / "nope.gz";
  CHECK_THAT(data_error_message([&] { (void)read_idx_images(path); }),
             Catch::Contains(path.string()));
  CHECK_THAT(data_error_message([&] { (void)read_idx_labels(path); }),
             Catch::Contains(path.string()));
}

}  // namespace gradmesh::tasks
