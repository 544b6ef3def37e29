// Tests for sync/option_table.cpp: the strategies' and schemes' own config tables, read and
// checked through the registry's declarations.

#include "sync/option_table.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "sync/ako/options.h"
#include "sync/ps/options.h"
#include "sync/sync_stage.h"

using namespace gradmesh;
using sync::OptionValues;

TEST_CASE("the registry holds the built-in strategies' and schemes' own tables",
          "[sync][options]") {
  std::vector<std::string> names;
  for (const sync::OptionTable& t : sync::option_tables()) names.push_back(t.name);
  for (const char* name : {"ako", "poseidon", "ps"}) {
    INFO(name);
    CHECK(std::count(names.begin(), names.end(), name) == 1);
  }
  REQUIRE(sync::find_option_key("ako.partitions") != nullptr);
  CHECK(sync::find_option_key("ako.partitions")->expected == "\"auto\" or an integer >= 1");
  CHECK(sync::find_option_key("ako.nothing") == nullptr);
  CHECK(sync::find_option_key("partitions") == nullptr);
}

TEST_CASE("option values read as their defaults until set, in canonical form", "[sync][options]") {
  OptionValues v;
  CHECK(v.is("ako.partitions", "auto"));
  CHECK(v.integer("ako.staleness") == 0);
  CHECK(v.text("ako.final") == "average");
  v.set("ako.partitions", std::int64_t{3});
  v.set("ako.bandwidth", std::string("100mbit"));  // a rate string: kept as bytes/s
  CHECK(v.integer("ako.partitions") == 3);
  CHECK(std::get<double>(v.get("ako.bandwidth")) == 12.5e6);
  v.set("ako.bandwidth", std::int64_t{1000});  // a whole number of bytes/s: a float
  CHECK(std::holds_alternative<double>(v.get("ako.bandwidth")));
  CHECK(v.number("ako.bandwidth") == 1000.0);

  sync::SyncOptions options;
  options.values = v;
  options.max_send_rate = 5e6;
  const sync::AkoOptions ako = sync::ako_options(options);
  CHECK(ako.partitions == 3u);
  CHECK(ako.bandwidth == 1000.0);
  CHECK(ako.max_send_rate == 5e6);
  CHECK(ako.final_model == sync::AkoFinal::kAverage);
}

TEST_CASE("an invalid value is refused and leaves the value as it was", "[sync][options]") {
  OptionValues v;
  v.set("ps.chunk_bytes", std::int64_t{4096});
  CHECK_FALSE(v.try_set("ps.chunk_bytes", std::int64_t{1022}));  // not a multiple of 4
  CHECK_FALSE(v.try_set("ps.chunk_bytes", std::string("big")));
  CHECK_FALSE(v.try_set("ps.chunk_bytes", 4096.0));  // a float is not an integer
  CHECK(sync::ps_options(v).chunk_bytes == 4096u);
  CHECK_THROWS_WITH(v.set("ako.staleness", std::int64_t{-1}),
                    Catch::Contains("sync.ako.staleness = -1: expected an integer >= 0"));
  CHECK_THROWS_WITH(v.set("poseidon.sfb", true),
                    Catch::Contains("sync.poseidon.sfb = true: expected one of auto, always"));
  CHECK_THROWS_AS(v.set("ako.bandwidth", std::string("fast")), std::invalid_argument);
  CHECK_THROWS_WITH(v.set("ako.bandwidth", -1.5),
                    Catch::Contains("sync.ako.bandwidth = -1.5: expected"));
}

TEST_CASE("option values refuse keys no table declares and reads of the wrong type",
          "[sync][options]") {
  OptionValues v;
  CHECK_THROWS_AS(v.set("ako.nothing", std::int64_t{1}), ContractError);
  CHECK_THROWS_AS((void)v.get("nothing.at_all"), ContractError);
  CHECK_THROWS_AS((void)v.integer("ako.final"), ContractError);   // a string
  CHECK_THROWS_AS((void)v.text("ako.staleness"), ContractError);  // an integer
}

TEST_CASE("option values compare by what they read: a default set equals one not set",
          "[sync][options]") {
  OptionValues a;
  OptionValues b;
  b.set("ako.final", std::string("average"));
  CHECK(a == b);
  b.set("ako.final", std::string("fold"));
  CHECK_FALSE(a == b);
  a.set("ako.final", std::string("fold"));
  CHECK(a == b);
}
