#include "tasks/data/fashion_mnist.h"

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "tasks/data/idx_reader.h"
#include "tests/tasks/data/idx_test_files.h"

namespace gradmesh::tasks {
namespace {

using testing::idx_bytes;
using testing::pattern;

// A tiny Fashion-MNIST-shaped directory: n_train / n_test images of 2 x 3.
void write_split(const std::filesystem::path& dir, const std::string& prefix, std::uint32_t images,
                 std::uint32_t labels, bool gz) {
  std::vector<std::uint8_t> ys(labels);
  for (std::uint32_t i = 0; i < labels; ++i) ys[i] = static_cast<std::uint8_t>(i % 10);
  const auto img = idx_bytes(kIdxImagesMagic, {images, 2, 3}, pattern(images * 6));
  const auto lab = idx_bytes(kIdxLabelsMagic, {labels}, ys);
  const std::string suffix = gz ? ".gz" : "";
  const auto write = gz ? testing::write_gz : testing::write_raw;
  write(dir / (prefix + "-images-idx3-ubyte" + suffix), img);
  write(dir / (prefix + "-labels-idx1-ubyte" + suffix), lab);
}

}  // namespace

TEST_CASE("load_fashion_mnist on a missing directory says how to install it", "[tasks][fmnist]") {
  const std::filesystem::path dir = "/nonexistent/gradmesh/fashion-mnist";
  try {
    (void)load_fashion_mnist(dir);
    FAIL("expected DataError");
  } catch (const DataError& e) {
    CHECK_THAT(e.what(), Catch::Contains(dir.string()));
    CHECK_THAT(e.what(), Catch::Contains("dataset-fashion-mnist"));
    CHECK_THAT(e.what(), Catch::Contains("/usr/share/datasets/fashion-mnist/"));
  }
}

TEST_CASE("load_fashion_mnist on a directory missing a file names it", "[tasks][fmnist]") {
  testing::TempDir dir;
  write_split(dir.path(), "train", 4, 4, true);
  try {
    (void)load_fashion_mnist(dir.path());
    FAIL("expected DataError");
  } catch (const DataError& e) {
    CHECK_THAT(e.what(), Catch::Contains((dir.path() / "t10k-images-idx3-ubyte").string()));
    CHECK_THAT(e.what(), Catch::Contains("dataset-fashion-mnist"));
  }
}

TEST_CASE("load_fashion_mnist reads gzipped and raw files", "[tasks][fmnist]") {
  testing::TempDir dir;
  write_split(dir.path(), "train", 12, 12, true);
  write_split(dir.path(), "t10k", 5, 5, false);
  const TrainTest tt = load_fashion_mnist(dir.path());
  CHECK(tt.train.count == 12);
  CHECK(tt.test.count == 5);
  CHECK(tt.train.features == 6);
  CHECK(tt.train.shape == Shape{1, 2, 3});  // rows x cols of the IDX header, one channel
  CHECK(sample_shape(tt.test) == Shape{1, 2, 3});
  CHECK(tt.train.classes == 10);
  CHECK(tt.train.y[11] == 1);
  CHECK(tt.test.x.size() == 5 * 6);
  CHECK_NOTHROW(validate(tt.train));
}

TEST_CASE("load_fashion_mnist refuses an image/label count mismatch", "[tasks][fmnist]") {
  testing::TempDir dir;
  write_split(dir.path(), "train", 12, 11, true);
  write_split(dir.path(), "t10k", 5, 5, true);
  CHECK_THROWS_AS(load_fashion_mnist(dir.path()), DataError);
  CHECK_THROWS_WITH(load_fashion_mnist(dir.path()), Catch::Contains("12 images"));
}

}  // namespace gradmesh::tasks
