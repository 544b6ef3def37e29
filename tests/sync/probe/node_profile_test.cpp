// Tests for sync/probe/node_profile.h: combine() (the job-wide figures from the n profiles) and
// a profile's wire form, with and without the compressor's figures.

#include "sync/probe/node_profile.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/error.h"
#include "topo/cost_model.h"

using namespace gradmesh;

TEST_CASE("combine: link matrix from the rows, max times, min GEMM", "[sync][probe]") {
  sync::NodeProfile a{{0, 1e-4}, {0, 1e8}, {1.0, 2.0}, {3.0, 1.0}, 5e9, 3e-5, {1.0, 0.25}};
  sync::NodeProfile b{{2e-4, 0}, {5e7, 0}, {0.5, 4.0}, {3.5, 0.5}, 2e9, 1e-5, {2.0, 0.0}};
  const sync::JobMeasurements job = sync::combine({a, b});
  CHECK(job.links.nodes == 2);
  CHECK(job.links.alpha == std::vector<double>{0, 1e-4, 2e-4, 0});
  CHECK(job.links.bandwidth == std::vector<double>{0, 1e8, 5e7, 0});
  CHECK(job.forward_seconds == std::vector<double>{1.0, 4.0});
  CHECK(job.backward_seconds == std::vector<double>{3.5, 1.0});
  CHECK(job.backward_input_seconds == std::vector<double>{2.0, 0.25});
  CHECK(job.gemm_flops == 2e9);
  CHECK(job.cipher_seconds_per_byte == 0);  // neither sealed
  a.cipher_seconds_per_byte = 1.3e-9;
  b.cipher_seconds_per_byte = 0.9e-9;
  CHECK(sync::combine({a, b}).cipher_seconds_per_byte == 1.3e-9);  // the slower node's
  CHECK(job.transport_seconds_per_byte == 0);                      // neither measured
  a.transport_seconds_per_byte = 0.4e-9;
  b.transport_seconds_per_byte = 0.7e-9;
  CHECK(sync::combine({a, b}).transport_seconds_per_byte == 0.7e-9);  // the slower node's
  const topo::LinkCost slowest = topo::slowest_link(job.links);
  CHECK(slowest.alpha == 2e-4);
  CHECK(slowest.bandwidth == 5e7);
  CHECK(job.links.message_seconds == std::vector<double>{3e-5, 1e-5});
  CHECK(slowest.message_seconds == 3e-5);
  CHECK(sync::combine({b, a}).gemm_flops == 2e9);  // deterministic, order-free where it should be
  CHECK_THROWS_AS(sync::combine({}), ContractError);
  sync::NodeProfile short_row = b;
  short_row.alpha.pop_back();
  CHECK_THROWS_AS(sync::combine({a, short_row}), ContractError);
  sync::NodeProfile fewer_layers = b;
  fewer_layers.forward_seconds.pop_back();
  fewer_layers.backward_seconds.pop_back();
  fewer_layers.backward_input_seconds.pop_back();
  CHECK_THROWS_AS(sync::combine({a, fewer_layers}), ContractError);
  sync::NodeProfile no_input_times = b;
  no_input_times.backward_input_seconds.clear();
  CHECK_THROWS_AS(sync::combine({a, no_input_times}), ContractError);
  // Codec figures: none measured, none combined; else per layer the max, of 0 or every layer.
  CHECK(sync::combine({a, b}).encode_seconds.empty());
  sync::NodeProfile coded = b;
  coded.encode_seconds = {3e-4, 1e-4};
  coded.decode_seconds = {1e-5, 2e-5};
  sync::NodeProfile coded_slower = a;
  coded_slower.encode_seconds = {2e-4, 5e-4};
  coded_slower.decode_seconds = {4e-5, 1e-5};
  CHECK(sync::combine({coded, coded_slower}).encode_seconds == std::vector<double>{3e-4, 5e-4});
  CHECK(sync::combine({coded, coded_slower}).decode_seconds == std::vector<double>{4e-5, 2e-5});
  CHECK(sync::combine({a, coded}).encode_seconds == coded.encode_seconds);
  sync::NodeProfile one_layer = coded;
  one_layer.encode_seconds.pop_back();
  one_layer.decode_seconds.pop_back();
  CHECK_THROWS_AS(sync::combine({a, one_layer}), ContractError);
  CHECK_FALSE(sync::probe::profile_problem(one_layer, 2).empty());
  sync::NodeProfile no_decode = coded;
  no_decode.decode_seconds.clear();
  CHECK_THROWS_AS(sync::combine({a, no_decode}), ContractError);
}

TEST_CASE("a profile with codec figures survives its wire form, and a wrong count is refused",
          "[sync][probe]") {
  sync::NodeProfile p{{0, 1e-4}, {0, 1e8}, {1.0, 2.0}, {3.0, 1.0}, 5e9, 3e-5, {1.0, 0.25}};
  for (const bool coded : {false, true}) {
    INFO("codec figures: " << coded);
    if (coded) {
      p.encode_seconds = {0.0, 7e-4};
      p.decode_seconds = {0.0, 9e-5};
      p.half_encode_seconds_per_float = 1.5e-9;
      p.half_decode_seconds_per_float = 2.5e-10;
      p.transport_seconds_per_byte = 6e-10;
    }
    const net::Payload wire = sync::probe::encode_profile(p);
    CHECK(wire.size() == 24 + 8 * (7 + 2 * 2 + 3 * 2 + (coded ? 2 * 2 : 0)));
    std::string why;
    const auto back = sync::probe::decode_profile(wire.bytes(), 2, why);
    INFO(why);
    REQUIRE(back);
    CHECK(*back == p);
  }
  // A header that claims codec figures for one layer of two: refused, saying why.
  net::Payload wire = sync::probe::encode_profile(p);
  std::vector<std::byte> bytes(wire.bytes().begin(), wire.bytes().end());
  const std::uint64_t one = 1;
  std::memcpy(bytes.data() + 16, &one, sizeof(one));
  std::string why;
  CHECK_FALSE(sync::probe::decode_profile(bytes, 2, why));
  CHECK_THAT(why, Catch::Contains("codec times of 1"));
  p.transport_seconds_per_byte = -1e-9;
  CHECK_THAT(sync::probe::profile_problem(p, 2), Catch::Contains("transport_seconds_per_byte"));
  p.transport_seconds_per_byte = 0;
  p.encode_seconds[1] = -1.0;
  CHECK_THAT(sync::probe::profile_problem(p, 2), Catch::Contains("negative"));
}
