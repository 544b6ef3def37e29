// Tests for apps/pipeline/data_source.h's built-in sources: synthetic batches equal the data set
// sharding of the same examples, and a source's classes are checked against the model.

#include "apps/pipeline/data_source.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "apps/config/job_config.h"
#include "apps/pipeline/job_options.h"
#include "apps/pipeline/pipeline.h"
#include "tasks/data/synthetic.h"

using namespace gradmesh;

TEST_CASE("synthetic batches equal DatasetSource's over the same examples, every rank and epoch",
          "[pipeline][data][synthetic]") {
  const tasks::SyntheticTask task(tasks::Shape{2, 3, 3}, 6, 11);
  const std::size_t count = 100, batch = 8, nodes = 3;
  const tasks::Dataset all = task.make(0, count);
  for (std::size_t rank = 0; rank < nodes; ++rank) {
    INFO("rank " << rank);
    app::SyntheticSource synthetic(task, count);
    app::DatasetSource dataset(all);
    CHECK(synthetic.sample_shape() == dataset.sample_shape());
    CHECK(synthetic.classes() == std::optional<std::size_t>{6});
    CHECK(dataset.classes() == std::optional<std::size_t>{6});
    const app::ShardInfo shard{rank, nodes, batch, 5};
    const std::size_t iterations = synthetic.open(shard);
    REQUIRE(iterations == dataset.open(shard));
    REQUIRE(iterations == 4);  // floor(floor(100 / 3) / 8)
    std::vector<float> x1(batch * 18), x2(batch * 18);
    std::vector<std::int32_t> y1(batch), y2(batch);
    for (std::size_t epoch = 0; epoch < 2; ++epoch) {
      for (std::size_t i = 0; i < iterations; ++i) {
        app::Batch b1{x1, y1, epoch, i}, b2{x2, y2, epoch, i};
        synthetic.fill(b1);
        dataset.fill(b2);
        CHECK(x1 == x2);
        CHECK(y1 == y2);
      }
    }
  }
}

TEST_CASE("data.shape and data.classes belong to synthetic data, and give its input shape",
          "[pipeline][data][synthetic][config]") {
  const std::string layers = "[model]\nlayers = [\"dense:10\"]\n";
  const auto parse = [&](const std::vector<std::string>& overrides) {
    return app::parse_job_config(layers, "x.toml", overrides);
  };
  CHECK(app::input_shape(parse({})) == tasks::Shape{1, 28, 28});
  CHECK_NOTHROW(app::check_data_keys(parse({})));
  const app::JobConfig image = parse({"data.dataset=synthetic", "data.shape=[3, 64, 64]"});
  CHECK_NOTHROW(app::check_data_keys(image));
  CHECK(app::input_shape(image) == tasks::Shape{3, 64, 64});
  CHECK(app::input_shape(parse({"data.dataset=synthetic", "data.shape=[100]"})) ==
        tasks::Shape::flat(100));
  CHECK(app::input_shape(parse({"data.dataset=synthetic"})) == tasks::Shape{1, 28, 28});
  for (const std::string key : {"data.shape", "data.classes"}) {
    INFO(key);
    const app::JobConfig on_disk = parse({key + (key == "data.shape" ? "=[3, 8, 8]" : "=12")});
    CHECK_THROWS_WITH(app::check_data_keys(on_disk),
                      Catch::StartsWith(key + " applies to data.dataset = \"synthetic\"") &&
                          Catch::Contains("\"fashion-mnist\" has its own"));
  }
}

TEST_CASE("optimizer.algorithm gives Adam's options and is refused with ako, naming both keys",
          "[pipeline][config]") {
  const std::string layers = "[model]\nlayers = [\"dense:10\"]\n";
  const auto parse = [&](const std::vector<std::string>& overrides) {
    return app::parse_job_config(layers, "x.toml", overrides);
  };
  CHECK_FALSE(app::adam_options(parse({})));
  const auto adamw = app::adam_options(
      parse({"optimizer.algorithm=adamw", "optimizer.beta2=0.99", "optimizer.eps=1e-6"}));
  REQUIRE(adamw);
  CHECK(adamw->decoupled);
  CHECK(adamw->beta1 == 0.9f);
  CHECK(adamw->beta2 == 0.99f);
  CHECK(adamw->eps == 1e-6f);
  CHECK_FALSE(app::adam_options(parse({"optimizer.algorithm=adam"}))->decoupled);
  CHECK_NOTHROW(app::check_optimizer_keys(parse({"optimizer.algorithm=adam"})));
  CHECK_NOTHROW(app::check_optimizer_keys(parse({"sync.strategy=ako"})));
  CHECK_THROWS_WITH(
      app::check_optimizer_keys(parse({"optimizer.algorithm=adam", "sync.strategy=ako"})),
      Catch::StartsWith("optimizer.algorithm = \"adam\" with sync.strategy = \"ako\"") &&
          Catch::Contains("(none, ps, poseidon, allreduce, local, auto) with adam"));
  // Every strategy that steps the job's optimizer takes Adam and AdamW: one node's (none) and
  // local SGD's inner optimizer (DiLoCo's is AdamW) too.
  for (const std::string strategy : {"none", "ps", "poseidon", "allreduce", "local", "auto"}) {
    for (const std::string algorithm : {"adam", "adamw"}) {
      INFO(strategy << ", " << algorithm);
      CHECK_NOTHROW(app::check_optimizer_keys(
          parse({"optimizer.algorithm=" + algorithm, "sync.strategy=" + strategy})));
    }
  }
}

TEST_CASE("a model given in C++ replaces model.layers, graphs too, and is checked as it",
          "[pipeline][graph]") {
  // One node (no peers): the Pipeline builds its model from the specs at set_source.
  const auto dir = std::filesystem::temp_directory_path() / "gradmesh-cpp-model";
  std::filesystem::create_directories(dir);
  const auto config = dir / "job.toml";
  std::ofstream(config) << "[job]\nname = \"cpp-model\"\n[data]\ndataset = \"synthetic\"\n"
                           "shape = [2, 6, 6]\nclasses = 4\n[model]\nlayers = [\"dense:4\", "
                           "\"softmax_cross_entropy\"]\n[optimizer]\nbatch_size = 8\n";
  const tasks::SyntheticTask task(tasks::Shape{2, 6, 6}, 4, 3);
  std::vector<tasks::LayerSpec> graph = {tasks::parse_layer_spec("stem = conv2d:4:3:1:1"),
                                         {"relu"},
                                         tasks::parse_layer_spec("conv2d:4:3:1:1"),
                                         tasks::parse_layer_spec("add <- stem"),
                                         {"global_avg_pool"},
                                         {"dense", 4},
                                         {"softmax_cross_entropy"}};
  graph[2].name = "branch";
  graph[3].inputs.push_back("branch");  // "add <- stem branch", built field by field
  app::NodeOptions options;
  options.config = config;
  {
    app::Pipeline pipeline(options);
    pipeline.set_source(std::make_unique<app::SyntheticSource>(task, 64), graph);
    CHECK(pipeline.model().num_layers() == 6);
    CHECK(pipeline.model().layer(3).kind() == "add");
    CHECK(pipeline.config().model.layers ==
          std::vector<std::string>{"stem = conv2d:4:3:1:1", "relu", "branch = conv2d:4:3:1:1",
                                   "add <- stem branch", "global_avg_pool", "dense:4",
                                   "softmax_cross_entropy"});
  }
  app::Pipeline bad(options);
  graph.pop_back();  // no loss
  CHECK_THROWS_WITH(bad.set_source(std::make_unique<app::SyntheticSource>(task, 64), graph),
                    Catch::Contains("expected the last entry to be 'softmax_cross_entropy'"));
  std::filesystem::remove_all(dir);
}
