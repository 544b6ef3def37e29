#include "sync/compress/half/half_block.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "sync/compress/wire_bytes.h"

namespace gradmesh::sync::compress {

std::uint16_t float_to_fp16(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7fff'ffffu;
  if (abs > 0x7f80'0000u) return sign | 0x7e00u | static_cast<std::uint16_t>((abs >> 13) & 0x3ffu);
  if (abs == 0x7f80'0000u) return sign | 0x7c00u;  // infinity stays infinite
  if (abs >= 0x477f'f000u) return sign | 0x7bffu;  // rounds to 65520 or more: saturate at 65504
  if (abs >= 0x3880'0000u) {                       // normal in binary16 (>= 2^-14)
    std::uint32_t h = (abs - 0x3800'0000u) >> 13;  // rebias the exponent from 127 to 15
    const std::uint32_t rest = abs & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;
    return sign | static_cast<std::uint16_t>(h);
  }
  // Subnormal in binary16: h 2^-24 with h = m 2^(e - 126), rounded to nearest even.
  const std::uint32_t e = abs >> 23;
  if (e < 102) return sign;  // below 2^-25: rounds to zero
  const std::uint32_t m = (abs & 0x7f'ffffu) | 0x80'0000u;
  const std::uint32_t shift = 126 - e;  // 14 .. 24
  std::uint32_t h = m >> shift;
  const std::uint32_t rest = m & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (h & 1u) != 0)) ++h;
  return sign | static_cast<std::uint16_t>(h);
}

float fp16_to_float(std::uint16_t bits) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // exact
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(magnitude) | sign);
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f80'0000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

std::uint16_t float_to_bf16(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7fff'ffffu) > 0x7f80'0000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  const std::uint32_t bias = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + bias) >> 16);
}

float bf16_to_float(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

float half_block_scale(tasks::HalfFormat format, std::span<const float> values) noexcept {
  if (format != tasks::HalfFormat::kFp16) return 1.0f;
  float largest = 0;
  for (const float v : values) {
    if (!std::isfinite(v)) return 1.0f;
    largest = std::max(largest, std::fabs(v));
  }
  if (largest == 0) return 1.0f;
  // largest = f 2^e with f in [0.5, 1): largest * 2^(15 - e) lies in [2^14, 2^15).
  const int e = std::ilogb(largest) + 1;
  return std::ldexp(1.0f, std::clamp(15 - e, -100, 100));
}

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
// fp16 conversions on the CPU's F16C instructions (8 floats at a time), where it has them: the
// same bits as float_to_fp16 / fp16_to_float (round to nearest even; finite values beyond 65504
// saturate to it, infinities and NaNs stay: the clamp passes them through), at a small fraction
// of the scalar conversion's time (bench/codec_step.cpp). No FMA in these targets: a decode_add
// rounds the product and the sum as the scalar loop does.
bool has_f16c() noexcept {
  static const bool yes = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return yes;
}

__attribute__((target("avx,f16c"))) std::size_t encode_fp16_f16c(float scale,
                                                                 std::span<const float> values,
                                                                 std::byte* out) noexcept {
  const __m256 factor = _mm256_set1_ps(scale);
  const __m256 high = _mm256_set1_ps(65504.0f), low = _mm256_set1_ps(-65504.0f);
  const __m256 infinity = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff'ffff));
  std::size_t i = 0;
  for (; i + 8 <= values.size(); i += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(values.data() + i), factor);
    // max(low, x), min(high, .): a NaN operand comes back as the second one, so NaNs pass.
    const __m256 clamped = _mm256_min_ps(high, _mm256_max_ps(low, x));
    const __m256 infinite = _mm256_cmp_ps(_mm256_and_ps(x, magnitude), infinity, _CMP_EQ_OQ);
    const __m128i h = _mm256_cvtps_ph(_mm256_blendv_ps(clamped, x, infinite),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  return i;
}

template <bool kAdd>
__attribute__((target("avx,f16c"))) std::size_t decode_fp16_f16c(float inverse, const std::byte* in,
                                                                 std::span<float> out) noexcept {
  const __m256 factor = _mm256_set1_ps(inverse);
  std::size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), factor);
    if constexpr (kAdd) v = _mm256_add_ps(_mm256_loadu_ps(out.data() + i), v);
    _mm256_storeu_ps(out.data() + i, v);
  }
  return i;
}

// bf16 decodes on SSE2 (every x86-64 CPU): a bf16 is a float's top half, so interleaving zeros
// below it gives the float; the same bits as bf16_to_float.
template <bool kAdd>
std::size_t decode_bf16_sse2(float inverse, const std::byte* in, std::span<float> out) noexcept {
  const __m128 factor = _mm_set1_ps(inverse);
  const __m128i zero = _mm_setzero_si128();
  std::size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    __m128 lo = _mm_mul_ps(_mm_castsi128_ps(_mm_unpacklo_epi16(zero, h)), factor);
    __m128 hi = _mm_mul_ps(_mm_castsi128_ps(_mm_unpackhi_epi16(zero, h)), factor);
    if constexpr (kAdd) {
      lo = _mm_add_ps(_mm_loadu_ps(out.data() + i), lo);
      hi = _mm_add_ps(_mm_loadu_ps(out.data() + i + 4), hi);
    }
    _mm_storeu_ps(out.data() + i, lo);
    _mm_storeu_ps(out.data() + i + 4, hi);
  }
  return i;
}
#else
bool has_f16c() noexcept { return false; }
template <bool kAdd>
std::size_t decode_bf16_sse2(float, const std::byte*, std::span<float>) noexcept {
  return 0;
}
std::size_t encode_fp16_f16c(float, std::span<const float>, std::byte*) noexcept { return 0; }
template <bool kAdd>
std::size_t decode_fp16_f16c(float, const std::byte*, std::span<float>) noexcept {
  return 0;
}
#endif

}  // namespace

void encode_half_block(tasks::HalfFormat format, float scale, std::span<const float> values,
                       std::byte* out) noexcept {
  if (format == tasks::HalfFormat::kFp16) {
    const std::size_t done = has_f16c() ? encode_fp16_f16c(scale, values, out) : 0;
    for (std::size_t i = done; i < values.size(); ++i) {
      detail::store(out + 2 * i, float_to_fp16(values[i] * scale));
    }
  } else {
    for (std::size_t i = 0; i < values.size(); ++i) {
      detail::store(out + 2 * i, float_to_bf16(values[i] * scale));
    }
  }
}

namespace {

template <bool kAdd>
void decode_half_into(tasks::HalfFormat format, float scale, const std::byte* in,
                      std::span<float> out) noexcept {
  const float inverse = 1.0f / scale;  // exact: scale is a power of two
  const auto put = [&](std::size_t i, float v) {
    if constexpr (kAdd) {
      out[i] += v * inverse;
    } else {
      out[i] = v * inverse;
    }
  };
  if (format == tasks::HalfFormat::kFp16) {
    const std::size_t done = has_f16c() ? decode_fp16_f16c<kAdd>(inverse, in, out) : 0;
    for (std::size_t i = done; i < out.size(); ++i)
      put(i, fp16_to_float(detail::load<std::uint16_t>(in + 2 * i)));
  } else {
    for (std::size_t i = decode_bf16_sse2<kAdd>(inverse, in, out); i < out.size(); ++i)
      put(i, bf16_to_float(detail::load<std::uint16_t>(in + 2 * i)));
  }
}

}  // namespace

void decode_half_block(tasks::HalfFormat format, float scale, const std::byte* in,
                       std::span<float> out) noexcept {
  decode_half_into<false>(format, scale, in, out);
}

void decode_add_half_block(tasks::HalfFormat format, float scale, const std::byte* in,
                           std::span<float> sum) noexcept {
  decode_half_into<true>(format, scale, in, sum);
}

}  // namespace gradmesh::sync::compress
