// Tests for sync/compress/codec.h: the half-precision conversions, each codec's error bound, the
// error-feedback invariant, random-k's shared indices, malformed encodings and the residual in
// checkpoints.

#include "sync/compress/codec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "sync/compress/half/half_block.h"
#include "sync/compress/int8/int8_compressor.h"
#include "tasks/random.h"

using namespace gradmesh::sync::compress;
using gradmesh::ConfigError;
using gradmesh::ProtocolError;
using gradmesh::tasks::HalfFormat;

namespace {

/// The parameters of a codec at `ratio` (top-k's and random-k's share) and random-k's `seed`.
CompressorParams with_ratio(double ratio, std::uint64_t seed) {
  return CompressorParams{.ratio = ratio, .seed = seed};
}

/// The 16-bit format of compressor `kind` ("fp16" or "bf16").
HalfFormat half_format_of(std::string_view kind) {
  return kind == "fp16" ? HalfFormat::kFp16 : HalfFormat::kBf16;
}

constexpr std::string_view kAll[] = {"none", "fp16", "bf16", "int8", "topk", "randomk"};

/// n floats, normal with spread `scale` (a gradient's shape: mostly small, a few large).
std::vector<float> gradient(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  gradmesh::tasks::SplitMix64 rng(seed);
  std::vector<float> out(n);
  for (float& v : out) {
    // Sum of 4 uniforms: a bell shape, then a heavy tail on one entry in 50.
    float x = rng.next_float() + rng.next_float() + rng.next_float() + rng.next_float() - 2.0f;
    if (rng.next_below(50) == 0) x *= 40.0f;
    v = x * scale;
  }
  return out;
}

/// Integers in [-50, 50]: sums of them are exact in fp32.
std::vector<float> integers(std::size_t n, std::uint64_t seed) {
  gradmesh::tasks::SplitMix64 rng(seed);
  std::vector<float> out(n);
  for (float& v : out) v = static_cast<float>(static_cast<int>(rng.next_below(101)) - 50);
  return out;
}

std::uint32_t bits(float v) { return std::bit_cast<std::uint32_t>(v); }

/// The float next to `v` towards +infinity in binary16 steps: for the nearest-value check.
float fp16_neighbour(std::uint16_t h, int step) {
  return fp16_to_float(static_cast<std::uint16_t>(static_cast<int>(h) + step));
}

}  // namespace

TEST_CASE("binary16 conversion rounds to nearest even and saturates finite values", "[compress]") {
  CHECK(float_to_fp16(1.0f) == 0x3c00);
  CHECK(float_to_fp16(-2.0f) == 0xc000);
  CHECK(float_to_fp16(0.0f) == 0x0000);
  CHECK(float_to_fp16(-0.0f) == 0x8000);
  CHECK(float_to_fp16(65504.0f) == 0x7bff);
  CHECK(float_to_fp16(65519.0f) == 0x7bff);  // below the half-way point to 65536
  CHECK(float_to_fp16(1e6f) == 0x7bff);      // saturated, not infinite
  CHECK(float_to_fp16(-1e6f) == 0xfbff);
  CHECK(float_to_fp16(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(std::isnan(fp16_to_float(float_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(float_to_fp16(0x1p-14f) == 0x0400);  // the smallest normal
  CHECK(float_to_fp16(0x1p-24f) == 0x0001);  // the smallest subnormal
  CHECK(float_to_fp16(0x1p-25f) == 0x0000);  // a tie: to even, zero
  CHECK(float_to_fp16(0x1.8p-25f) == 0x0001);
  CHECK(float_to_fp16(0x1.8p-24f) == 0x0002);          // a tie between 1 and 2: to even
  CHECK(float_to_fp16(1.0f + 0x1p-11f) == 0x3c00);     // a tie: to even (down)
  CHECK(float_to_fp16(1.0f + 0x1.8p-10f) == 0x3c02);   // a tie: to even (up)
  CHECK(float_to_fp16(1.0f + 0x1.01p-11f) == 0x3c01);  // just above the tie: up

  // Every binary16 value converts to a float and back to itself.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float f = fp16_to_float(half);
    if (std::isnan(f)) continue;
    REQUIRE(float_to_fp16(f) == half);
  }
  // Random floats in binary16's range go to a nearest value (no neighbour is closer).
  gradmesh::tasks::SplitMix64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const float x =
        std::ldexp(rng.next_float() * 2.0f - 1.0f, static_cast<int>(rng.next_below(40)) - 26);
    const std::uint16_t h = float_to_fp16(x);
    const float d = std::abs(x - fp16_to_float(h));
    const std::uint16_t magnitude = h & 0x7fff;
    if (magnitude > 0) REQUIRE(d <= std::abs(x - fp16_neighbour(h, -1)));
    if (magnitude < 0x7bff) REQUIRE(d <= std::abs(x - fp16_neighbour(h, 1)));
  }
}

TEST_CASE("bfloat16 conversion keeps the top half of a float, rounded to nearest even",
          "[compress]") {
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(1.0f + 0x1p-8f) == 0x3f80);     // a tie: to even (down)
  CHECK(float_to_bf16(1.0f + 0x1.8p-7f) == 0x3f82);   // a tie: to even (up)
  CHECK(float_to_bf16(1.0f + 0x1.01p-8f) == 0x3f81);  // just above the tie: up
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float f = bf16_to_float(half);
    if (std::isnan(f)) continue;
    REQUIRE(float_to_bf16(f) == half);
  }
}

TEST_CASE("codec names parse, a wrong one is a config error naming the key", "[compress]") {
  for (const std::string_view kind : kAll) CHECK(compressor_entry(kind).name == kind);
  try {
    (void)compressor_entry("zip", "sync.compression");
    FAIL("parsed an unknown compressor");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("sync.compression") && Catch::Contains("topk"));
  }
  CHECK_THROWS_AS(Codec("topk", 10, with_ratio(0.0, 0), true), ConfigError);
  CHECK_THROWS_AS(Codec("topk", 10, with_ratio(1.5, 0), true), ConfigError);
  CHECK(kept_entries(0, 0.1) == 0);
  CHECK(kept_entries(1000, 0.01) == 10);
  CHECK(kept_entries(1001, 0.01) == 11);  // rounded up
  CHECK(kept_entries(5, 0.001) == 1);     // at least one
  CHECK(kept_entries(5, 1.0) == 5);
}

TEST_CASE("each codec's encoding has its size and its error within its bound", "[compress]") {
  const std::size_t n = 3 * kInt8ChunkFloats + 77;  // a last chunk cut short
  const std::vector<float> g = gradient(n, 11);
  for (const std::string_view kind : kAll) {
    INFO(kind);
    Codec codec(kind, n, with_ratio(0.05, 3), /*error_feedback=*/false);
    std::vector<std::byte> wire(codec.encoded_bytes());
    const EncodeStats stats = codec.encode(g, wire, 0);
    std::vector<float> decoded(n);
    codec.decode(wire, decoded, 0);
    double error2 = 0, norm2 = 0;
    for (std::size_t i = 0; i < n; ++i) {
      error2 += static_cast<double>(g[i] - decoded[i]) * (g[i] - decoded[i]);
      norm2 += static_cast<double>(g[i]) * g[i];
    }
    CHECK(stats.input_norm2 == Approx(norm2).epsilon(1e-12));
    CHECK(stats.gradient_norm2 == stats.input_norm2);  // no residual: p = g
    CHECK(stats.error_norm2 == Approx(error2).epsilon(1e-6).margin(1e-12));
    if (kind == "none") {
      CHECK(wire.size() == 4 * n);
      CHECK(decoded == g);
    } else if (kind == "fp16" || kind == "bf16") {
      CHECK(wire.size() == 2 * n);
      const float bound = kind == "fp16" ? 0x1p-11f : 0x1p-8f;  // half an ulp
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(std::abs(g[i] - decoded[i]) <= bound * std::abs(g[i]) + 0x1p-25f);
      }
    } else if (kind == "int8") {
      CHECK(wire.size() == 4 * 4 + n);
      for (std::size_t c = 0; c * kInt8ChunkFloats < n; ++c) {
        float max_abs = 0;
        const std::size_t end = std::min(n, (c + 1) * kInt8ChunkFloats);
        for (std::size_t i = c * kInt8ChunkFloats; i < end; ++i)
          max_abs = std::max(max_abs, std::abs(g[i]));
        for (std::size_t i = c * kInt8ChunkFloats; i < end; ++i) {
          REQUIRE(std::abs(g[i] - decoded[i]) <= max_abs / 254.0f * 1.0001f);
        }
      }
    } else if (kind == "topk") {
      const std::size_t k = kept_entries(n, 0.05);
      CHECK(wire.size() == 8 * k);
      // Kept entries are exact; every dropped one is no larger than the smallest kept.
      float smallest_kept = std::numeric_limits<float>::infinity();
      float largest_dropped = 0;
      std::size_t kept = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (decoded[i] != 0.0f) {
          REQUIRE(decoded[i] == g[i]);
          smallest_kept = std::min(smallest_kept, std::abs(g[i]));
          ++kept;
        } else {
          largest_dropped = std::max(largest_dropped, std::abs(g[i]));
        }
      }
      CHECK(kept == k);
      CHECK(largest_dropped <= smallest_kept);
    } else if (kind == "randomk") {
      const std::size_t k = kept_entries(n, 0.05);
      CHECK(wire.size() == 4 * k);
      std::size_t kept = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (decoded[i] != 0.0f) {
          REQUIRE(decoded[i] == g[i]);
          ++kept;
        }
      }
      CHECK(kept == k);  // no entry of g is 0
    }
  }
}

TEST_CASE("with error feedback, what is sent plus the residual is exactly what was given",
          "[compress]") {
  const std::size_t n = 2 * kInt8ChunkFloats + 13;
  for (const std::string_view kind : kAll) {
    if (kind == "none") continue;
    INFO(kind << ", bit for bit at each step");
    Codec codec(kind, n, with_ratio(0.1, 5), true);
    std::vector<std::byte> wire(codec.encoded_bytes());
    std::vector<float> decoded(n);
    for (std::uint64_t t = 0; t < 6; ++t) {
      const std::vector<float> g = gradient(n, 100 + t, t % 2 == 0 ? 1.0f : 1e-3f);
      std::vector<float> p(codec.residual().begin(), codec.residual().end());
      double g2 = 0, p2 = 0;
      for (std::size_t i = 0; i < n; ++i) {
        p[i] += g[i];
        g2 += static_cast<double>(g[i]) * g[i];
        p2 += static_cast<double>(p[i]) * p[i];
      }
      const EncodeStats stats = codec.encode(g, wire, t);
      CHECK(stats.gradient_norm2 == Approx(g2).epsilon(1e-12));  // ||g||, ||g + e||
      CHECK(stats.input_norm2 == Approx(p2).epsilon(1e-12));
      codec.decode(wire, decoded, t);
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(bits(decoded[i] + codec.residual()[i]) == bits(p[i]));
      }
    }
  }
  // Summed over a run, on integers, for the sparse codecs.
  for (const std::string_view kind : {"topk", "randomk"}) {
    INFO(kind << ", summed over a run");
    Codec codec(kind, n, with_ratio(0.02, 9), true);
    std::vector<std::byte> wire(codec.encoded_bytes());
    std::vector<float> given(n, 0.0f), sent(n, 0.0f);
    for (std::uint64_t t = 0; t < 20; ++t) {
      const std::vector<float> g = integers(n, 300 + t);
      for (std::size_t i = 0; i < n; ++i) given[i] += g[i];
      (void)codec.encode(g, wire, t);
      codec.decode_add(wire, sent, t);
    }
    for (std::size_t i = 0; i < n; ++i) REQUIRE(sent[i] + codec.residual()[i] == given[i]);
  }
}

TEST_CASE("random-k picks the same indices on every node, so its values sum on a ring",
          "[compress]") {
  const std::size_t n = 1000;
  Codec a("randomk", n, with_ratio(0.1, 42), true);
  Codec b("randomk", n, with_ratio(0.1, 42), true);
  const std::vector<float> ga = integers(n, 1), gb = integers(n, 2);
  std::vector<std::byte> wa(a.encoded_bytes()), wb(b.encoded_bytes());
  (void)a.encode(ga, wa, 17);
  (void)b.encode(gb, wb, 17);
  // The ring adds encodings value by value; decoding the sum gives the sum of the decodings.
  std::vector<std::byte> summed(wa.size());
  for (std::size_t j = 0; j < a.kept(); ++j) {
    float x, y;
    std::memcpy(&x, wa.data() + 4 * j, 4);
    std::memcpy(&y, wb.data() + 4 * j, 4);
    const float s = x + y;
    std::memcpy(summed.data() + 4 * j, &s, 4);
  }
  std::vector<float> expected(n, 0.0f), from_sum(n);
  a.decode_add(wa, expected, 17);
  b.decode_add(wb, expected, 17);
  a.decode(summed, from_sum, 17);
  CHECK(from_sum == expected);
  // Another iteration draws other indices (one per stratum of n / k = 10 floats).
  std::vector<float> at17(n), at18(n);
  (void)a.encode(ga, wa, 18);
  a.decode(wa, at18, 18);
  a.decode(summed, at17, 17);
  std::size_t same = 0;
  for (std::size_t i = 0; i < n; ++i) same += (at17[i] != 0.0f && at18[i] != 0.0f) ? 1 : 0;
  CHECK(same < a.kept() / 2);
}

TEST_CASE("a malformed encoding is refused and changes nothing", "[compress]") {
  const std::size_t n = 100;
  Codec topk("topk", n, with_ratio(0.05, 0), false);
  std::vector<std::byte> wire(topk.encoded_bytes());
  (void)topk.encode(gradient(n, 3), wire, 0);
  std::vector<float> sum(n, 1.0f);
  const std::vector<float> before = sum;

  std::vector<std::byte> short_wire(wire.begin(), wire.end() - 1);
  CHECK_THROWS_AS(topk.decode_add(short_wire, sum, 0), ProtocolError);
  std::vector<std::byte> out_of_range = wire;
  const std::uint32_t far = 1000;
  std::memcpy(out_of_range.data() + 4, &far, 4);
  CHECK_THROWS_WITH(topk.decode_add(out_of_range, sum, 0), Catch::Contains("out of range"));
  std::vector<std::byte> unordered = wire;
  std::memcpy(unordered.data() + 4, unordered.data(), 4);  // entry 1 repeats entry 0's index
  CHECK_THROWS_WITH(topk.decode_add(unordered, sum, 0), Catch::Contains("not ascending"));
  CHECK(sum == before);

  Codec fp16("fp16", n, with_ratio(1.0, 0), false);
  CHECK_THROWS_AS(fp16.decode_add(std::vector<std::byte>(2 * n + 2), sum, 0), ProtocolError);
  CHECK(sum == before);
}

TEST_CASE("the residual is saved and restored bit for bit: the run goes on as if never stopped",
          "[compress]") {
  const std::size_t n = 700;
  for (const std::string_view kind : {"int8", "topk", "randomk"}) {
    INFO(kind);
    Codec through(kind, n, with_ratio(0.05, 8), true);
    Codec stopped(kind, n, with_ratio(0.05, 8), true);
    std::vector<std::byte> w1(through.encoded_bytes()), w2(stopped.encoded_bytes());
    for (std::uint64_t t = 0; t < 3; ++t) {
      (void)through.encode(gradient(n, t), w1, t);
      (void)stopped.encode(gradient(n, t), w2, t);
    }
    gradmesh::engine::StateWriter out;
    stopped.save_state(out);
    Codec resumed(kind, n, with_ratio(0.05, 8), true);
    gradmesh::engine::StateReader in(out.bytes(), "residual");
    resumed.load_state(in);
    for (std::uint64_t t = 3; t < 6; ++t) {
      (void)through.encode(gradient(n, t), w1, t);
      (void)resumed.encode(gradient(n, t), w2, t);
      REQUIRE(w1 == w2);
    }
    Codec other(kind, n + 1, with_ratio(0.05, 8), true);
    gradmesh::engine::StateReader wrong(out.bytes(), "residual");
    CHECK_THROWS_AS(other.load_state(wrong), gradmesh::CheckpointError);
  }
}

TEST_CASE("half blocks: fp16 scaled by a power of two keeps 11 bits at any magnitude, bf16 8",
          "[compress][codec]") {
  for (const float magnitude : {1e-9f, 1e-6f, 1.0f, 3e4f, 1e8f}) {
    INFO("magnitude " << magnitude);
    const std::vector<float> values = gradient(1000, 17, magnitude);
    float largest = 0;
    for (const float v : values) largest = std::max(largest, std::fabs(v));
    const float scale = half_block_scale(HalfFormat::kFp16, values);
    // A power of two that puts the largest magnitude in [2^14, 2^15): no saturation.
    int exponent = 0;
    CHECK(std::frexp(scale, &exponent) == 0.5f);
    CHECK(largest * scale >= 16384.0f);
    CHECK(largest * scale < 32768.0f);
    CHECK(half_block_scale(HalfFormat::kBf16, values) == 1.0f);

    for (const std::string_view kind : {"fp16", "bf16"}) {
      const float s = half_block_scale(half_format_of(kind), values);
      std::vector<std::byte> wire(2 * values.size());
      encode_half_block(half_format_of(kind), s, values, wire.data());
      std::vector<float> back(values.size());
      decode_half_block(half_format_of(kind), s, wire.data(), back);
      // Relative error of a normal value: 2^-11 (fp16's 10 stored bits, round to nearest), 2^-8
      // (bf16's 7). Values below 2^-14 of the scaled range are fp16 subnormals: absolute bound.
      const double relative = kind == "fp16" ? 0x1p-11 : 0x1p-8;
      for (std::size_t i = 0; i < values.size(); ++i) {
        const double v = values[i];
        const double bound = kind == "fp16" ? std::max(relative * std::fabs(v), 0x1p-25 / s)
                                            : relative * std::fabs(v);
        REQUIRE(std::fabs(back[i] - v) <= bound);
      }
    }
  }
}

TEST_CASE("half blocks: zero, non-finite values and extreme magnitudes", "[compress][codec]") {
  const std::vector<float> zeros(8, 0.0f);
  CHECK(half_block_scale(HalfFormat::kFp16, zeros) == 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> with_nan{1.0f, nan, 2.0f};
  CHECK(half_block_scale(HalfFormat::kFp16, with_nan) == 1.0f);
  std::vector<std::byte> wire(6);
  encode_half_block(HalfFormat::kFp16, 1.0f, with_nan, wire.data());
  std::vector<float> back(3);
  decode_half_block(HalfFormat::kFp16, 1.0f, wire.data(), back);
  CHECK(back[0] == 1.0f);
  CHECK(std::isnan(back[1]));  // a NaN travels as it would uncompressed
  CHECK(back[2] == 2.0f);
  // The scale is clamped at 2^100: 1e-30 still comes back within fp16's bits, a float's smallest
  // normal (2^-126) is beyond it and goes to zero.
  const std::vector<float> tiny{1e-30f, std::numeric_limits<float>::min()};
  const float scale = half_block_scale(HalfFormat::kFp16, tiny);
  CHECK(scale == std::ldexp(1.0f, 100));
  encode_half_block(HalfFormat::kFp16, scale, tiny, wire.data());
  decode_half_block(HalfFormat::kFp16, scale, wire.data(), std::span<float>(back).first(2));
  CHECK(std::fabs(back[0] - 1e-30f) <= 0x1p-11 * 1e-30);
  CHECK(back[1] == 0.0f);
}

TEST_CASE("half blocks: every float converts as the scalar conversions do, bit for bit",
          "[compress][codec]") {
  // encode_half_block and decode_(add_)half_block run 8 floats at a time on the CPU's F16C
  // instructions where it has them: they must give the bits float_to_fp16 / fp16_to_float give,
  // for normal, subnormal, saturating, infinite and NaN inputs alike. Random bit patterns, the
  // boundaries, and every binary16 value back; odd lengths leave a scalar tail.
  std::vector<float> values;
  for (const float special :
       {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e30f, -1e30f, 0x1p-14f, 0x1p-24f,
        0x1p-25f, 0x1.8p-25f, 0x1p-26f, std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
        std::numeric_limits<float>::denorm_min()}) {
    values.push_back(special);
  }
  gradmesh::tasks::SplitMix64 rng(5);
  for (int i = 0; i < 200'003; ++i) {
    values.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng.next())));
  }
  std::vector<std::byte> wire(2 * values.size());
  encode_half_block(HalfFormat::kFp16, 1.0f, values, wire.data());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint16_t h = 0;
    std::memcpy(&h, wire.data() + 2 * i, 2);
    mismatches += h != float_to_fp16(values[i]) ? 1 : 0;
  }
  CHECK(mismatches == 0);
  // Decoding: all 65,536 binary16 patterns (and 3 more for the tail), with a scale, plain and
  // added to a sum.
  std::vector<std::byte> all(2 * 65'539);
  for (std::uint32_t b = 0; b < 65'539; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    std::memcpy(all.data() + 2 * b, &h, 2);
  }
  std::vector<float> back(65'539), sum(65'539, 0.75f);
  decode_half_block(HalfFormat::kFp16, 4.0f, all.data(), back);
  decode_add_half_block(HalfFormat::kFp16, 4.0f, all.data(), sum);
  std::size_t decode_mismatches = 0;
  for (std::uint32_t b = 0; b < 65'539; ++b) {
    const float v = fp16_to_float(static_cast<std::uint16_t>(b)) * 0.25f;
    const float s = 0.75f + v;
    decode_mismatches += std::bit_cast<std::uint32_t>(back[b]) != std::bit_cast<std::uint32_t>(v);
    decode_mismatches += std::bit_cast<std::uint32_t>(sum[b]) != std::bit_cast<std::uint32_t>(s);
  }
  CHECK(decode_mismatches == 0);
  // bf16 decodes 8 at a time on SSE2: the same bits as bf16_to_float.
  decode_half_block(HalfFormat::kBf16, 4.0f, all.data(), back);
  std::fill(sum.begin(), sum.end(), 0.75f);
  decode_add_half_block(HalfFormat::kBf16, 4.0f, all.data(), sum);
  std::size_t bf16_mismatches = 0;
  for (std::uint32_t b = 0; b < 65'539; ++b) {
    const float v = bf16_to_float(static_cast<std::uint16_t>(b)) * 0.25f;
    const float s = 0.75f + v;
    bf16_mismatches += std::bit_cast<std::uint32_t>(back[b]) != std::bit_cast<std::uint32_t>(v);
    bf16_mismatches += std::bit_cast<std::uint32_t>(sum[b]) != std::bit_cast<std::uint32_t>(s);
  }
  CHECK(bf16_mismatches == 0);
}

TEST_CASE("int8: every chunk's scale and bytes as the scalar rule gives them, bit for bit",
          "[compress][codec]") {
  // The encode takes a chunk's largest magnitude and rounds x / scale 16 floats at a time on SSE2:
  // it must give scale = max |p| / 127 and q = clamp(nearbyint(p / scale), -127, 127) of the
  // scalar rule, on gradients, ties (x.5 after scaling), zeros and chunks with a scalar tail.
  for (const std::size_t n :
       {std::size_t{1}, std::size_t{15}, std::size_t{512}, std::size_t{1037}, std::size_t{4099}}) {
    INFO(n << " floats");
    std::vector<float> g = gradient(n, 17 + n);
    if (n > 20) {
      g[3] = 0.0f;
      g[4] = -0.0f;
      g[5] = g[0] * 0.5f / 127.0f;  // ties are unlikely but not impossible after scaling
    }
    Codec codec("int8", n, with_ratio(1.0, 0), false);
    std::vector<std::byte> wire(codec.encoded_bytes());
    (void)codec.encode(g, wire, 0);
    const std::size_t chunks = (n + kInt8ChunkFloats - 1) / kInt8ChunkFloats;
    std::size_t mismatches = 0;
    for (std::size_t c = 0; c < chunks; ++c) {
      const std::size_t begin = c * kInt8ChunkFloats, end = std::min(n, begin + kInt8ChunkFloats);
      float max_abs = 0;
      for (std::size_t i = begin; i < end; ++i) max_abs = std::max(max_abs, std::abs(g[i]));
      const float scale = max_abs / 127.0f;
      float sent_scale = 0;
      std::memcpy(&sent_scale, wire.data() + 4 * c, 4);
      mismatches += bits(sent_scale) != bits(scale) ? 1 : 0;
      const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
      for (std::size_t i = begin; i < end; ++i) {
        const float q = std::clamp(std::nearbyint(g[i] * inverse), -127.0f, 127.0f);
        const auto sent = static_cast<std::int8_t>(wire[4 * chunks + i]);
        mismatches += static_cast<float>(sent) != q ? 1 : 0;
      }
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("mask_sent zeroes exactly the entries an encoding sent", "[compress][codec]") {
  const std::size_t n = 1000;
  const std::vector<float> g = gradient(n, 23);
  for (const std::string_view kind : {"topk", "randomk", "int8"}) {
    INFO(kind);
    Codec codec(kind, n, with_ratio(0.05, 9), false);
    std::vector<std::byte> wire(codec.encoded_bytes());
    (void)codec.encode(g, wire, 4);
    std::vector<float> sent(n, 0.0f), values(n, 1.0f);
    codec.decode(wire, sent, 4);
    codec.mask_sent(wire, values, 4);
    std::size_t zeroed = 0, mismatches = 0;
    for (std::size_t i = 0; i < n; ++i) {
      zeroed += values[i] == 0.0f ? 1 : 0;
      // A sent entry decodes to its value (non-zero here); every other one to 0 (sparse codecs).
      if (kind != "int8") mismatches += (values[i] == 0.0f) != (sent[i] != 0.0f) ? 1 : 0;
    }
    CHECK(zeroed == codec.kept());
    CHECK(mismatches == 0);
  }
}
