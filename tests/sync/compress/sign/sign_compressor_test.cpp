// Tests for sync/compress/sign/: the scale is each chunk's mean magnitude (EF-SignSGD's
// ||p||_1 / d), every entry decodes to +-scale by its sign, and the wire's padding is checked.

#include "sync/compress/sign/sign_compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"

using namespace gradmesh::sync::compress;

TEST_CASE("sign: a chunk decodes to its mean magnitude with each entry's sign",
          "[compress][sign]") {
  const std::size_t n = kSignChunkFloats + 3;  // a full chunk and a short one
  std::vector<float> p(n);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = (i % 3 == 0 ? -1.0f : 1.0f) * static_cast<float>(i % 5);  // zeros included
  }
  std::unique_ptr<Compressor> c = compressor_entry("sign").make(n, {});
  CHECK(c->encoded_bytes() == 2 * 4 + (n + 7) / 8);
  std::vector<std::byte> wire(c->encoded_bytes());
  c->encode(p, wire, 0, nullptr);

  for (std::size_t chunk = 0; chunk < 2; ++chunk) {
    const std::size_t begin = chunk * kSignChunkFloats;
    const std::size_t end = std::min(n, begin + kSignChunkFloats);
    double l1 = 0;
    for (std::size_t i = begin; i < end; ++i) l1 += std::fabs(p[i]);
    float scale = 0;
    std::memcpy(&scale, wire.data() + 4 * chunk, 4);
    CHECK(scale == static_cast<float>(l1 / static_cast<double>(end - begin)));
  }
  std::vector<float> back(n);
  c->decode(wire, back, 0);
  float first_scale = 0;
  std::memcpy(&first_scale, wire.data(), 4);
  for (std::size_t i = 0; i < kSignChunkFloats; ++i) {
    CAPTURE(i);
    // A zero is sent as +scale.
    REQUIRE(back[i] == (p[i] < 0 ? -first_scale : first_scale));
  }
}

TEST_CASE("sign: the last byte's unused bits must be 0", "[compress][sign]") {
  std::unique_ptr<Compressor> c = compressor_entry("sign").make(5, {});
  const std::vector<float> p{1.0f, -2.0f, 3.0f, -4.0f, 5.0f};
  std::vector<std::byte> wire(c->encoded_bytes());
  c->encode(p, wire, 0, nullptr);
  REQUIRE_NOTHROW(c->check(wire));
  CHECK(std::to_integer<unsigned>(wire.back()) == 0b01010u);
  wire.back() |= std::byte{0x80};
  CHECK_THROWS_AS(c->check(wire), gradmesh::ProtocolError);
}
