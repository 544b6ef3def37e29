#include "tasks/data/fashion_mnist.h"

#include <spdlog/spdlog.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "tasks/data/idx_reader.h"

namespace gradmesh::tasks {
namespace {

constexpr std::string_view kInstallHint =
    "install the Debian package dataset-fashion-mnist (scripts/setup.sh does), which puts the "
    "files in /usr/share/datasets/fashion-mnist/";
constexpr std::size_t kFashionMnistClasses = 10;

/// dir/name.gz if it exists, else dir/name if it exists, else DataError naming both.
std::filesystem::path find_file(const std::filesystem::path& dir, const std::string& name) {
  std::error_code ec;
  const auto gz = dir / (name + ".gz");
  if (std::filesystem::is_regular_file(gz, ec)) return gz;
  const auto raw = dir / name;
  if (std::filesystem::is_regular_file(raw, ec)) return raw;
  throw DataError("Fashion-MNIST: neither " + gz.string() + " nor " + raw.string() + " exists; " +
                  std::string(kInstallHint));
}

Dataset load_split(const std::filesystem::path& dir, const std::string& prefix) {
  const auto images_path = find_file(dir, prefix + "-images-idx3-ubyte");
  const auto labels_path = find_file(dir, prefix + "-labels-idx1-ubyte");
  IdxImages images = read_idx_images(images_path);
  const std::vector<std::uint8_t> labels = read_idx_labels(labels_path);
  if (images.count != labels.size()) {
    throw DataError("Fashion-MNIST: " + images_path.string() + " holds " +
                    std::to_string(images.count) + " images but " + labels_path.string() +
                    " holds " + std::to_string(labels.size()) + " labels; expected equal counts");
  }
  Dataset d;
  d.count = images.count;
  d.features = images.rows * images.cols;
  d.classes = kFashionMnistClasses;
  d.shape = Shape{1, images.rows, images.cols};
  d.x = std::move(images.pixels);
  d.y.assign(labels.begin(), labels.end());
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= kFashionMnistClasses) {
      throw DataError("Fashion-MNIST: " + labels_path.string() + ": label " + std::to_string(i) +
                      " is " + std::to_string(labels[i]) + ", expected a class in [0, 10)");
    }
  }
  return d;
}

}  // namespace

TrainTest load_fashion_mnist(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw DataError("Fashion-MNIST: directory " + dir.string() + " does not exist; " +
                    std::string(kInstallHint));
  }
  TrainTest out{load_split(dir, "train"), load_split(dir, "t10k")};
  spdlog::debug("loaded Fashion-MNIST from {}: {} train, {} test examples of {} features",
                dir.string(), out.train.count, out.test.count, out.train.features);
  return out;
}

}  // namespace gradmesh::tasks
