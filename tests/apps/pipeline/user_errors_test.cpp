// Errors that name the program's own mistake (issue 30 item 3): the data source's shape, a label
// out of range, the Pipeline API used out of order. One node, in-process.

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "apps/pipeline/data_source.h"
#include "apps/pipeline/pipeline.h"
#include "engine/error.h"
#include "tasks/data/synthetic.h"

namespace app = gradmesh::app;
namespace tasks = gradmesh::tasks;

namespace {

/// A one-node job's options: synthetic-size data, 4 iterations of 4 samples.
app::NodeOptions options_for(const std::string& name, const std::string& layers) {
  const auto dir = std::filesystem::temp_directory_path() / ("gradmesh-user-errors-" + name);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "job.toml") << "[job]\nname = \"" << name
                                  << "\"\nmax_iterations = 4\n[data]\ndataset = \"synthetic\"\n"
                                     "shape = [4]\nclasses = 3\n[model]\nlayers = "
                                  << layers << "\n[optimizer]\nbatch_size = 4\n"
                                  << "[planner]\nprobe = false\n";
  app::NodeOptions options;
  options.config = dir / "job.toml";
  return options;
}

/// A source of four-feature samples whose labels are fine but for one: `bad` at index 2 of the
/// second batch.
class OffByOneSource final : public app::DataSource {
 public:
  explicit OffByOneSource(std::int32_t bad) : bad_(bad) {}
  [[nodiscard]] tasks::Shape sample_shape() const override { return tasks::Shape::flat(4); }
  std::size_t open(const app::ShardInfo& shard) override {
    (void)shard;
    return 4;
  }
  void fill(app::Batch& batch) override {
    for (float& x : batch.input) x = 0.5f;
    for (std::size_t i = 0; i < batch.size(); ++i)
      batch.labels[i] = static_cast<std::int32_t>(i % 3);
    if (batch.iteration == 1) batch.labels[2] = bad_;
  }

 private:
  std::int32_t bad_;
};

/// A source of flat vectors (3,072 floats, a 32 x 32 RGB image flattened by mistake).
class FlatImageSource final : public app::DataSource {
 public:
  [[nodiscard]] tasks::Shape sample_shape() const override { return tasks::Shape::flat(3072); }
  std::size_t open(const app::ShardInfo&) override { return 1; }
  void fill(app::Batch&) override {}
};

}  // namespace

TEST_CASE("a label out of range names the source, the epoch, the iteration and the index",
          "[pipeline][errors]") {
  for (const std::int32_t bad : {3, -1}) {
    app::Pipeline pipeline(options_for("bad-label", "[\"dense:3\", \"softmax_cross_entropy\"]"));
    pipeline.set_source(std::make_unique<OffByOneSource>(bad));
    try {
      (void)pipeline.run();
      FAIL("a label of " << bad << " was accepted");
    } catch (const gradmesh::Error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK_THAT(what, Catch::Contains("data source OffByOneSource") &&
                           Catch::Contains("label " + std::to_string(bad) + " at index 2") &&
                           Catch::Contains("epoch 1, iteration 2") &&
                           Catch::Contains("expected a class in [0, 3)"));
      CHECK_THAT(what, !Catch::Contains(".cpp"));
    }
  }
}

TEST_CASE("a model that does not fit the source's samples names its sample_shape()",
          "[pipeline][errors]") {
  app::Pipeline pipeline(options_for(
      "flat-image",
      "[\"conv2d:16:3:1:1\", \"max_pool2d:2\", \"dense:3\", \"softmax_cross_entropy\"]"));
  CHECK_THROWS_WITH(pipeline.set_source(std::make_unique<FlatImageSource>()),
                    Catch::Contains("model.layers[1] 'max_pool2d:2:2'") &&
                        Catch::Contains("FlatImageSource::sample_shape(), 3072x1x1: a flat "
                                        "vector of 3072 floats; convolutions and pooling want C x "
                                        "H x W"));
}

TEST_CASE("the Pipeline API used out of order is refused before any work, without source paths",
          "[pipeline][errors]") {
  app::Pipeline pipeline(options_for("api-order", "[\"dense:3\", \"softmax_cross_entropy\"]"));
  CHECK_THROWS_WITH(pipeline.model(), Catch::StartsWith("Pipeline: model() before set_source()"));
  CHECK_THROWS_WITH(pipeline.graph(), Catch::StartsWith("Pipeline: graph() before build()"));
  CHECK_THROWS_AS(pipeline.set_source(nullptr), gradmesh::ContractError);
  pipeline.set_source(std::make_unique<OffByOneSource>(0));
  CHECK_THROWS_WITH(pipeline.set_source(std::make_unique<OffByOneSource>(0)),
                    Catch::StartsWith("Pipeline: set_source() called twice"));
  const app::NodeMetrics metrics = pipeline.run();
  CHECK(metrics.iterations == 4);
  try {
    (void)pipeline.run();
    FAIL("a second run() was accepted");
  } catch (const gradmesh::ContractError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::StartsWith("Pipeline: run() called twice") &&
                         Catch::Contains("construct another Pipeline") && !Catch::Contains(".cpp"));
  }
}
