// Tests for sync/compress/powersgd/powersgd_profile.h: what start-up measures of PowerSGD's passes
// and sync/compress/scheme_method.h's entry for it. No timing thresholds: the figures are checked
// for their shape (sizes, zeros, one measurement per shape, linear scaling past the cap).

#include "sync/compress/powersgd/powersgd_profile.h"

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "sync/compress/options.h"
#include "sync/compress/scheme_method.h"
#include "topo/scheme_model.h"

using namespace gradmesh;
using sync::compress::kMaxProfiledFloats;

TEST_CASE("profile_powersgd: one figure a matrix shape, 0 without one, scaled past the cap",
          "[compress][profile]") {
  using sync::compress::MatrixShape;
  // A layer without weights, two of one shape, a small one, and one twice the cap's rows at its
  // width (measured on half its rows: exactly twice the cap-sized layer's figure).
  const std::size_t cols = 1024;
  const std::size_t capped = kMaxProfiledFloats / cols;
  const std::vector<MatrixShape> shapes{{0, 0},   {64, 96},           {10, 32},
                                        {64, 96}, {2 * capped, cols}, {capped, cols}};
  const auto p = sync::compress::profile_powersgd(4, shapes, 0.0, 7);
  REQUIRE(p.encode_seconds.size() == shapes.size());
  REQUIRE(p.decode_seconds.size() == shapes.size());
  CHECK(p.encode_seconds[0] == 0);
  CHECK(p.decode_seconds[0] == 0);
  for (std::size_t l = 1; l < shapes.size(); ++l) {
    CHECK(p.encode_seconds[l] > 0);
    CHECK(p.decode_seconds[l] > 0);
  }
  CHECK(p.encode_seconds[3] == p.encode_seconds[1]);  // one measurement a shape
  CHECK(p.decode_seconds[3] == p.decode_seconds[1]);
  CHECK(p.encode_seconds[4] == 2 * p.encode_seconds[5]);
  CHECK(p.decode_seconds[4] == 2 * p.decode_seconds[5]);
  CHECK(p.half_encode_seconds_per_float == 0);
  CHECK_THROWS_AS(sync::compress::profile_powersgd(4, shapes, -1.0, 1), ContractError);
  CHECK_THROWS_AS(sync::compress::profile_powersgd(0, shapes, 0.0, 1), ConfigError);
}

TEST_CASE("PowerSGD is a scheme method: it stands in for all-reduce, under its own name",
          "[compress][powersgd]") {
  const sync::SchemeMethod* method = sync::find_scheme_method("powersgd");
  REQUIRE(method != nullptr);
  CHECK(method->bases == std::vector<std::string_view>{topo::kAllReduceScheme});
  CHECK(sync::compression_bases("powersgd") == method->bases);
  sync::CompressionOptions options;
  options.method = "powersgd";
  options.rank = 3;
  const topo::SchemeModel model = method->model(options);
  CHECK(model.id == "powersgd");
  CHECK(model.compressed);
  CHECK(sync::find_scheme_method("fp16") == nullptr);  // a compressor, not a scheme method
  CHECK(sync::find_scheme_method("nosuch") == nullptr);
}
