#include "engine/key_value_text.h"

#include <catch2/catch.hpp>

namespace gradmesh {
namespace {

TEST_CASE("key_value_difference names each differing key with both sides' values", "[engine]") {
  const std::string a = "job.name = \"x\"\noptimizer.lr = 0.1\nsync.strategy = \"ps\"\n";
  CHECK(key_value_difference(a, a, "here", "there").empty());
  const std::string b = "job.name = \"x\"\noptimizer.lr = 0.2\nsync.extra = 1\n";
  CHECK(key_value_difference(a, b, "on rank 0", "on rank 1") ==
        "optimizer.lr = 0.1 on rank 0, 0.2 on rank 1; "
        "sync.strategy = \"ps\" on rank 0, no such key on rank 1; "
        "sync.extra = no such key on rank 0, 1 on rank 1");
  // Lines without " = " (a TOML table header, a blank line) are not keys.
  CHECK(key_value_difference("[job]\n\nname = 1\n", "[sync]\nname = 1\n", "a", "b").empty());
}

TEST_CASE("edit_distance counts the single-character edits between two words", "[engine]") {
  CHECK(edit_distance("relu", "relu") == 0);
  CHECK(edit_distance("rleu", "relu") == 2);
  CHECK(edit_distance("maxpool2d", "max_pool2d") == 1);
  CHECK(edit_distance("", "dense") == 5);
  CHECK(edit_distance("optimizer.lrr", "optimizer.lr") == 1);
}

}  // namespace
}  // namespace gradmesh
