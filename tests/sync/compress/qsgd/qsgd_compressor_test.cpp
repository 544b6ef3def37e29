// Tests for sync/compress/qsgd/: stochastic rounding is unbiased (the mean over iterations within
// its variance bound), each entry's squared error within (scale / s)^2 / 4 on average, the bits a
// value and their validation, and the draws per (seed, rank, iteration).

#include "sync/compress/qsgd/qsgd_compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "tasks/random.h"

using namespace gradmesh::sync::compress;

namespace {

std::vector<float> values(std::size_t n) {
  gradmesh::tasks::SplitMix64 rng(5);
  std::vector<float> out(n);
  for (float& v : out) v = (rng.next_float() - 0.5f) * 0.2f;
  return out;
}

}  // namespace

TEST_CASE("qsgd: stochastic rounding is unbiased and its error within QSGD's bound",
          "[compress][qsgd]") {
  const std::size_t n = kQsgdChunkFloats;  // one chunk: one scale
  const std::vector<float> p = values(n);
  float scale = 0;
  for (const float v : p) scale = std::max(scale, std::fabs(v));
  for (const std::int64_t bits : {2, 4, 8}) {
    CAPTURE(bits);
    const double s = static_cast<double>((1 << (bits - 1)) - 1);
    const double step = scale / s;
    std::unique_ptr<Compressor> c =
        compressor_entry("qsgd").make(n, CompressorParams{.seed = 9, .rank = 1, .bits = bits});
    CHECK(c->encoded_bytes() == 4 + static_cast<std::size_t>(n * bits / 8));
    constexpr int kDraws = 2000;
    std::vector<double> mean(n, 0.0);
    double squared_error = 0;
    std::vector<std::byte> wire(c->encoded_bytes());
    std::vector<float> back(n);
    for (int t = 0; t < kDraws; ++t) {
      c->encode(p, wire, static_cast<std::uint64_t>(t), nullptr);
      c->decode(wire, back, static_cast<std::uint64_t>(t));
      for (std::size_t i = 0; i < n; ++i) {
        // Each value is one of the two levels around p[i].
        REQUIRE(std::fabs(back[i] - p[i]) <= step * (1 + 1e-5));
        mean[i] += back[i] / kDraws;
        squared_error += (back[i] - static_cast<double>(p[i])) * (back[i] - p[i]);
      }
    }
    // Unbiased: a mean of kDraws draws has a standard deviation of at most step / (2 sqrt(kDraws));
    // six of them (the draws are fixed by the seeds: this cannot fail by chance).
    const double bound = 6 * step / (2 * std::sqrt(static_cast<double>(kDraws)));
    for (std::size_t i = 0; i < n; ++i) REQUIRE(std::fabs(mean[i] - p[i]) <= bound);
    // E (D - p)^2 = step^2 f (1 - f) <= step^2 / 4 for each entry.
    CHECK(squared_error / (kDraws * n) <= step * step / 4);
  }
}

TEST_CASE(
    "qsgd: bits other than 2, 4, 8 are a config error, and the draws follow seed, rank, iteration",
    "[compress][qsgd]") {
  for (const std::int64_t bits : {0, 1, 3, 16}) {
    CHECK_THROWS_AS(compressor_entry("qsgd").make(10, CompressorParams{.bits = bits}),
                    gradmesh::ConfigError);
  }
  const std::vector<float> p = values(1000);
  const auto encoded = [&](std::uint64_t rank, std::uint64_t iteration) {
    std::unique_ptr<Compressor> c = compressor_entry("qsgd").make(
        p.size(), CompressorParams{.seed = 4, .rank = rank, .bits = 4});
    std::vector<std::byte> wire(c->encoded_bytes());
    c->encode(p, wire, iteration, nullptr);
    return wire;
  };
  CHECK(encoded(0, 1) == encoded(0, 1));  // a rerun draws the same
  CHECK(encoded(0, 1) != encoded(1, 1));  // another node draws its own
  CHECK(encoded(0, 1) != encoded(0, 2));  // and another iteration
}

TEST_CASE("qsgd: non-finite values make their chunk NaN on the wire, and the padding is checked",
          "[compress][qsgd]") {
  std::vector<float> p(kQsgdChunkFloats + 2, 0.5f);
  p[3] = std::numeric_limits<float>::infinity();
  std::unique_ptr<Compressor> c =
      compressor_entry("qsgd").make(p.size(), CompressorParams{.bits = 2});
  std::vector<std::byte> wire(c->encoded_bytes());
  c->encode(p, wire, 0, nullptr);
  std::vector<float> back(p.size());
  c->decode(wire, back, 0);
  CHECK(std::isnan(back[3]));
  CHECK(std::isnan(back[10]));
  CHECK(back[kQsgdChunkFloats] == 0.5f);  // the next chunk is its own
  wire.back() |= std::byte{0x80};         // 514 x 2 bits: the last byte uses 4
  CHECK_THROWS_AS(c->check(wire), gradmesh::ProtocolError);
}

TEST_CASE("qsgd: a chunk of zeros, and one whose scale is subnormal, encode as levels of it",
          "[compress][qsgd]") {
  std::vector<float> p(2 * kQsgdChunkFloats, 0.0f);  // chunk 0: zeros
  for (std::size_t i = kQsgdChunkFloats; i < p.size(); ++i) {
    p[i] = (i % 2 == 0 ? 1.0f : -1.0f) * 1e-41f;  // chunk 1: subnormal, s / scale overflows
  }
  std::unique_ptr<Compressor> c = compressor_entry("qsgd").make(p.size(), CompressorParams{});
  std::vector<std::byte> wire(c->encoded_bytes());
  std::vector<float> error(p.size());
  c->encode(p, wire, 0, error.data());
  std::vector<float> back(p.size());
  c->decode(wire, back, 0);
  for (std::size_t i = 0; i < p.size(); ++i) {
    CAPTURE(i);
    REQUIRE(std::isfinite(back[i]));
    REQUIRE(back[i] + error[i] == Approx(p[i]).margin(1e-45));
    if (i < kQsgdChunkFloats) REQUIRE(back[i] == 0.0f);
  }
}
