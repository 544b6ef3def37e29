#include "tasks/layers/layer_spec.h"

#include <catch2/catch.hpp>
#include <stdexcept>

namespace gradmesh::tasks {

TEST_CASE("parse_layer_spec accepts the three kinds", "[tasks][spec]") {
  CHECK(parse_layer_spec("dense:256") == LayerSpec{"dense", 256});
  CHECK(parse_layer_spec(" relu ") == LayerSpec{"relu", 0});
  CHECK(parse_layer_spec("softmax_cross_entropy") == LayerSpec{"softmax_cross_entropy", 0});
}

TEST_CASE("parse_layer_spec reads conv2d, max_pool2d, flatten and dropout with their defaults",
          "[tasks][spec]") {
  CHECK(parse_layer_spec("conv2d:32:5") == LayerSpec{"conv2d", 32, 5, 1, 0});
  CHECK(parse_layer_spec("conv2d:32:5:1:2") == LayerSpec{"conv2d", 32, 5, 1, 2});
  CHECK(parse_layer_spec("conv2d:8:3:2") == LayerSpec{"conv2d", 8, 3, 2, 0});
  CHECK(parse_layer_spec("max_pool2d:2") == LayerSpec{"max_pool2d", 0, 2, 2});
  CHECK(parse_layer_spec("max_pool2d:3:2") == LayerSpec{"max_pool2d", 0, 3, 2});
  CHECK(parse_layer_spec("avg_pool2d:2") == LayerSpec{"avg_pool2d", 0, 2, 2});
  CHECK(parse_layer_spec("avg_pool2d:3:1") == LayerSpec{"avg_pool2d", 0, 3, 1});
  CHECK(parse_layer_spec(" global_avg_pool ") == LayerSpec{"global_avg_pool"});
  CHECK_THROWS_WITH(parse_layer_spec("avg_pool2d"),
                    Catch::StartsWith("expected 'avg_pool2d:<window>[:<stride>]', got"));
  CHECK_THROWS_WITH(parse_layer_spec("global_avg_pool:2"),
                    Catch::Contains("got 'global_avg_pool:2'"));
  CHECK(parse_layer_spec(" flatten") == LayerSpec{"flatten"});
  CHECK(parse_layer_spec("dropout:0.5") == LayerSpec{"dropout", 0, 0, 0, 0, 0.5});
  CHECK(parse_layer_spec("dropout:0") == LayerSpec{"dropout"});
  for (const char* text :
       {"dense:256", "conv2d:32:5:1:2", "max_pool2d:3:2", "avg_pool2d:3:2", "global_avg_pool",
        "dropout:0.25", "flatten", "relu", "softmax_cross_entropy"}) {
    CHECK(to_string(parse_layer_spec(text)) == text);
  }
  CHECK(to_string(parse_layer_spec("conv2d:32:5")) == "conv2d:32:5:1:0");
}

TEST_CASE("parse_layer_spec says what each new kind expected", "[tasks][spec]") {
  CHECK_THROWS_WITH(parse_layer_spec("conv2d:0:5"),
                    "expected 'conv2d:<filters>:<kernel>[:<stride>[:<padding>]]', got "
                    "'conv2d:0:5' (filters must be a decimal integer >= 1)");
  CHECK_THROWS_WITH(parse_layer_spec("conv2d:32"),
                    Catch::Contains("(2 to 4 field(s) after the kind, got 1)"));
  CHECK_THROWS_WITH(parse_layer_spec("conv2d:32:5:0"), Catch::Contains("stride must be"));
  CHECK_THROWS_WITH(parse_layer_spec("conv2d:32:5:1:x"), Catch::Contains("padding must be"));
  CHECK_THROWS_WITH(parse_layer_spec("conv2d:1:1:1:1:1"), Catch::Contains("got 5"));
  CHECK_THROWS_WITH(parse_layer_spec("max_pool2d"),
                    "expected 'max_pool2d:<window>[:<stride>]', got 'max_pool2d' (1 to 2 "
                    "field(s) after the kind, got 0)");
  CHECK_THROWS_WITH(parse_layer_spec("max_pool2d:0"), Catch::Contains("window must be"));
  for (const char* bad : {"dropout", "dropout:1", "dropout:-0.1", "dropout:x", "dropout:0.5:1",
                          "dropout:nan", "dropout:0.5x"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_layer_spec(bad),
                      Catch::StartsWith("expected 'dropout:<p>'") &&
                          Catch::Contains("p must be a decimal number with 0 <= p < 1"));
  }
  CHECK_THROWS_WITH(parse_layer_spec("flatten:2"), Catch::Contains("expected 'dense:<units>', "));
  CHECK_THROWS_WITH(parse_layer_spec("conv:3"), Catch::Contains("'conv2d:<filters>:<kernel>"));
}

TEST_CASE("parse_layer_spec says what it expected", "[tasks][spec]") {
  CHECK_THROWS_WITH(
      parse_layer_spec("dens:5"),
      Catch::StartsWith(
          "expected 'dense:<units>', 'conv2d:<filters>:<kernel>[:<stride>[:<padding>]]', "
          "'max_pool2d:<window>[:<stride>]', 'avg_pool2d:<window>[:<stride>]', "
          "'global_avg_pool', 'batch_norm', 'flatten', 'dropout:<p>', 'relu', 'add', "
          "'concat', 'basic_block:<channels>[:<stride>]', "
          "'bottleneck_block:<channels>[:<stride>]' or "
          "'softmax_cross_entropy', got 'dens:5' (no layer kind 'dens'; did you "
          "mean 'dense'?; a kind of one's own must be registered with "
          "gradmesh::tasks::register_layer(\"dens\", factory) before the config is "
          "read (before the Pipeline is constructed))"));
  // A near miss gets a suggestion; a far one only how to register.
  CHECK_THROWS_WITH(parse_layer_spec("maxpool2d:2"), Catch::Contains("did you mean 'max_pool2d'?"));
  CHECK_THROWS_WITH(parse_layer_spec("transformer:8"),
                    !Catch::Contains("did you mean") && Catch::Contains("register_layer"));
  for (const char* bad :
       {"dense", "dense:", "dense:0", "dense:-3", "dense:12x", "dense:+4", "Relu", "", "conv:3"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_layer_spec(bad), std::invalid_argument);
    CHECK_THROWS_WITH(parse_layer_spec(bad), Catch::Contains("expected 'dense:<units>'"));
  }
}

TEST_CASE("parse_layer_specs checks the list and names the index", "[tasks][spec]") {
  const auto demo = parse_layer_specs(
      {"dense:256", "relu", "dense:256", "relu", "dense:10", "softmax_cross_entropy"});
  REQUIRE(demo.size() == 6);
  CHECK(demo[4] == LayerSpec{"dense", 10});
  CHECK_THROWS_WITH(parse_layer_specs({"dense:4", "rleu", "softmax_cross_entropy"}),
                    Catch::StartsWith("model.layers[1]: "));
  CHECK_THROWS_WITH(parse_layer_specs({"dense:4", "softmax_cross_entropy", "relu"}),
                    Catch::StartsWith("model.layers[1]: "));
  CHECK_THROWS_WITH(parse_layer_specs({"dense:4", "relu"}), Catch::StartsWith("model.layers[1]: "));
  CHECK_THROWS_WITH(parse_layer_specs({"relu", "softmax_cross_entropy"}),
                    Catch::Contains("at least one 'dense"));
  CHECK_THROWS_AS(parse_layer_specs({}), std::invalid_argument);
}

}  // namespace gradmesh::tasks
