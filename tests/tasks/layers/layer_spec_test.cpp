#include "tasks/layers/layer_spec.h"

#include <catch2/catch.hpp>
#include <stdexcept>

namespace gradmesh::tasks {

TEST_CASE("parse_layer_spec accepts the three kinds", "[tasks][spec]") {
  CHECK(parse_layer_spec("dense:256") == LayerSpec{"dense", 256});
  CHECK(parse_layer_spec(" relu ") == LayerSpec{"relu", 0});
  CHECK(parse_layer_spec("softmax_cross_entropy") == LayerSpec{"softmax_cross_entropy", 0});
}

TEST_CASE("parse_layer_spec says what it expected", "[tasks][spec]") {
  CHECK_THROWS_WITH(parse_layer_spec("dens:5"),
                    "expected 'dense:<units>', 'relu' or 'softmax_cross_entropy', got 'dens:5'");
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
