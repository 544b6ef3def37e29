#include "sync/compress/codec.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "engine/error.h"
#include "tasks/random.h"

namespace gradmesh::sync::compress {

static_assert(std::endian::native == std::endian::little,
              "the codecs' wire layouts are little-endian and written with memcpy");

namespace {

constexpr std::string_view kNames[] = {"none", "fp16", "bf16", "int8", "topk", "randomk"};

std::size_t int8_chunks(std::size_t floats) noexcept {
  return (floats + kInt8ChunkFloats - 1) / kInt8ChunkFloats;
}

template <typename T>
T load(const std::byte* at) noexcept {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

template <typename T>
void store(std::byte* at, T value) noexcept {
  std::memcpy(at, &value, sizeof(T));
}

}  // namespace

std::string_view codec_name(CodecKind kind) noexcept {
  return kNames[static_cast<std::size_t>(kind)];
}

CodecKind parse_codec_kind(std::string_view name, std::string_view key) {
  for (std::size_t i = 0; i < std::size(kNames); ++i) {
    if (kNames[i] == name) return static_cast<CodecKind>(i);
  }
  std::string known;
  for (const std::string_view n : kNames) known += (known.empty() ? "" : ", ") + std::string(n);
  throw ConfigError(std::string(key) + ": unknown compressor \"" + std::string(name) +
                    "\" (known: " + known + ")");
}

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

float half_block_scale(CodecKind kind, std::span<const float> values) noexcept {
  if (kind != CodecKind::kFp16) return 1.0f;
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

// int8 on SSE2: the largest magnitude of a chunk, and its quantization. max(|x|, acc) ignores a
// NaN |x| as std::max(acc, |x|) does; clamping to [-127, 127] before rounding gives what rounding
// then clamping gives for every number; cvtps2dq rounds to nearest even (the default MXCSR mode),
// as std::nearbyint does in the default rounding mode.
float max_abs_sse2(const float* in, std::size_t count, std::size_t* done) noexcept {
  const __m128 magnitude = _mm_castsi128_ps(_mm_set1_epi32(0x7fff'ffff));
  __m128 acc = _mm_setzero_ps();
  std::size_t i = 0;
  for (; i + 4 <= count; i += 4) acc = _mm_max_ps(_mm_and_ps(_mm_loadu_ps(in + i), magnitude), acc);
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, acc);
  *done = i;
  return std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
}

std::size_t quantize_int8_sse2(const float* in, std::size_t count, float inverse,
                               std::int8_t* out) noexcept {
  const __m128 factor = _mm_set1_ps(inverse);
  const __m128 high = _mm_set1_ps(127.0f), low = _mm_set1_ps(-127.0f);
  const auto round = [&](const float* at) {
    const __m128 y = _mm_mul_ps(_mm_loadu_ps(at), factor);
    return _mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(y, low), high));
  };
  std::size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m128i lo = _mm_packs_epi32(round(in + i), round(in + i + 4));
    const __m128i hi = _mm_packs_epi32(round(in + i + 8), round(in + i + 12));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_packs_epi16(lo, hi));
  }
  return i;
}
#else
float max_abs_sse2(const float*, std::size_t, std::size_t* done) noexcept {
  *done = 0;
  return 0.0f;
}
std::size_t quantize_int8_sse2(const float*, std::size_t, float, std::int8_t*) noexcept {
  return 0;
}
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

void encode_half_block(CodecKind kind, float scale, std::span<const float> values,
                       std::byte* out) noexcept {
  if (kind == CodecKind::kFp16) {
    const std::size_t done = has_f16c() ? encode_fp16_f16c(scale, values, out) : 0;
    for (std::size_t i = done; i < values.size(); ++i) {
      store(out + 2 * i, float_to_fp16(values[i] * scale));
    }
  } else {
    for (std::size_t i = 0; i < values.size(); ++i) {
      store(out + 2 * i, float_to_bf16(values[i] * scale));
    }
  }
}

namespace {

template <bool kAdd>
void decode_half_into(CodecKind kind, float scale, const std::byte* in,
                      std::span<float> out) noexcept {
  const float inverse = 1.0f / scale;  // exact: scale is a power of two
  const auto put = [&](std::size_t i, float v) {
    if constexpr (kAdd) {
      out[i] += v * inverse;
    } else {
      out[i] = v * inverse;
    }
  };
  if (kind == CodecKind::kFp16) {
    const std::size_t done = has_f16c() ? decode_fp16_f16c<kAdd>(inverse, in, out) : 0;
    for (std::size_t i = done; i < out.size(); ++i)
      put(i, fp16_to_float(load<std::uint16_t>(in + 2 * i)));
  } else {
    for (std::size_t i = decode_bf16_sse2<kAdd>(inverse, in, out); i < out.size(); ++i)
      put(i, bf16_to_float(load<std::uint16_t>(in + 2 * i)));
  }
}

}  // namespace

void decode_half_block(CodecKind kind, float scale, const std::byte* in,
                       std::span<float> out) noexcept {
  decode_half_into<false>(kind, scale, in, out);
}

void decode_add_half_block(CodecKind kind, float scale, const std::byte* in,
                           std::span<float> sum) noexcept {
  decode_half_into<true>(kind, scale, in, sum);
}

std::size_t kept_entries(std::size_t floats, double ratio) noexcept {
  if (floats == 0) return 0;
  const double k = std::ceil(ratio * static_cast<double>(floats));
  return std::clamp<std::size_t>(static_cast<std::size_t>(std::max(k, 1.0)), 1, floats);
}

Codec::Codec(CodecKind kind, std::size_t floats, double ratio, bool error_feedback,
             std::uint64_t seed)
    : kind_(kind),
      floats_(floats),
      kept_(floats),
      error_feedback_(error_feedback && kind != CodecKind::kNone),
      seed_(seed) {
  if (!(ratio > 0.0 && ratio <= 1.0)) {
    throw ConfigError("sync.compression.ratio = " + std::to_string(ratio) +
                      ": the share of entries kept must be in (0, 1]");
  }
  if (kind == CodecKind::kTopK || kind == CodecKind::kRandomK) {
    GRADMESH_CHECK(floats <= UINT32_MAX, "Codec: a sparse codec indexes at most 2^32 floats");
    kept_ = kept_entries(floats, ratio);
  }
  if (error_feedback_) residual_.assign(floats, 0.0f);
  if (kind == CodecKind::kTopK) order_.resize(floats);
}

std::size_t encoded_bytes(CodecKind kind, std::size_t floats, std::size_t kept) noexcept {
  switch (kind) {
    case CodecKind::kNone:
      return 4 * floats;
    case CodecKind::kFp16:
    case CodecKind::kBf16:
      return 2 * floats;
    case CodecKind::kInt8:
      return 4 * int8_chunks(floats) + floats;
    case CodecKind::kTopK:
      return 8 * kept;
    case CodecKind::kRandomK:
      return 4 * kept;
  }
  return 0;
}

std::size_t Codec::encoded_bytes() const noexcept {
  return compress::encoded_bytes(kind_, floats_, kept_);
}

std::uint64_t Codec::random_stream(std::uint64_t iteration) const noexcept {
  return tasks::derive_seed(seed_, iteration);
}

std::size_t Codec::random_index(std::uint64_t stream, std::size_t j) const noexcept {
  // Stratified: the j-th of k equal strata of [0, n), one uniform index in each. Distinct and
  // ascending by construction, O(1) each, and the same on every node for the same iteration.
  const std::size_t lo = j * floats_ / kept_;
  const std::size_t hi = (j + 1) * floats_ / kept_;
  tasks::SplitMix64 rng(tasks::derive_seed(stream, j));
  return lo + static_cast<std::size_t>(rng.next_below(hi - lo));
}

EncodeStats Codec::encode(std::span<const float> gradient, std::span<std::byte> out,
                          std::uint64_t iteration) {
  GRADMESH_CHECK_EQ(gradient.size(), floats_, "Codec::encode: gradient size");
  GRADMESH_CHECK_EQ(out.size(), encoded_bytes(), "Codec::encode: output size");
  const std::size_t n = floats_;
  // p = g + e, kept in the residual's buffer (it becomes e' = p - D(C(p)) in place).
  // One pass: p, ||g||^2 and ||p||^2. The norms (figures only) sum in 4 interleaved parts, so
  // that the additions do not wait on each other.
  float* p = nullptr;
  EncodeStats stats;
  std::array<double, 4> gradient2{}, input2{}, error2{};
  if (error_feedback_) {
    for (std::size_t i = 0; i < n; ++i) {
      const float g = gradient[i];
      const float sum = residual_[i] + g;
      residual_[i] = sum;
      gradient2[i % 4] += static_cast<double>(g) * g;
      input2[i % 4] += static_cast<double>(sum) * sum;
    }
    p = residual_.data();
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      input2[i % 4] += static_cast<double>(gradient[i]) * gradient[i];
    }
    gradient2 = input2;
  }
  const auto total = [](const std::array<double, 4>& parts) {
    return (parts[0] + parts[1]) + (parts[2] + parts[3]);
  };
  stats.gradient_norm2 = total(gradient2);
  stats.input_norm2 = total(input2);
  const float* in = error_feedback_ ? p : gradient.data();
  // One entry decoded as `sent`: the error, and with error feedback the residual e' = p - sent.
  const auto account = [&](std::size_t i, float sent) {
    const float error = in[i] - sent;
    error2[i % 4] += static_cast<double>(error) * error;
    if (p != nullptr) p[i] = error;
  };
  std::byte* bytes = out.data();
  switch (kind_) {
    case CodecKind::kNone:
      if (n > 0) std::memcpy(bytes, in, 4 * n);
      break;
    case CodecKind::kFp16:
    case CodecKind::kBf16: {
      // The block conversions (F16C where the CPU has it: the same bits as the scalar ones),
      // a block at a time through a decoded copy on the stack for the error and the residual.
      constexpr std::size_t kBlock = 1024;
      std::array<float, kBlock> sent;
      for (std::size_t begin = 0; begin < n; begin += kBlock) {
        const std::size_t size = std::min(kBlock, n - begin);
        encode_half_block(kind_, 1.0f, std::span(in + begin, size), bytes + 2 * begin);
        decode_half_block(kind_, 1.0f, bytes + 2 * begin, std::span(sent.data(), size));
        for (std::size_t j = 0; j < size; ++j) account(begin + j, sent[j]);
      }
      break;
    }
    case CodecKind::kInt8: {
      const std::size_t chunks = int8_chunks(n);
      auto* values = reinterpret_cast<std::int8_t*>(bytes + 4 * chunks);
      for (std::size_t c = 0; c < chunks; ++c) {
        const std::size_t begin = c * kInt8ChunkFloats;
        const std::size_t end = std::min(n, begin + kInt8ChunkFloats);
        std::size_t done = 0;
        float max_abs = max_abs_sse2(in + begin, end - begin, &done);
        for (std::size_t i = begin + done; i < end; ++i) {
          max_abs = std::max(max_abs, std::abs(in[i]));
        }
        const float scale = max_abs / 127.0f;
        store(bytes + 4 * c, scale);
        const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
        done = quantize_int8_sse2(in + begin, end - begin, inverse, values + begin);
        for (std::size_t i = begin + done; i < end; ++i) {
          const float q = std::clamp(std::nearbyint(in[i] * inverse), -127.0f, 127.0f);
          values[i] = static_cast<std::int8_t>(q);
        }
        for (std::size_t i = begin; i < end; ++i) account(i, static_cast<float>(values[i]) * scale);
      }
      break;
    }
    case CodecKind::kTopK: {
      const std::size_t k = kept_;
      std::iota(order_.begin(), order_.end(), std::uint32_t{0});
      // A total order (magnitude, then index): the same choice on every run of the same input.
      const auto larger = [in](std::uint32_t a, std::uint32_t b) {
        const float x = std::abs(in[a]), y = std::abs(in[b]);
        return x > y || (x == y && a < b);
      };
      std::nth_element(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k - 1),
                       order_.end(), larger);
      std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k));
      for (std::size_t j = 0; j < k; ++j) {
        const std::uint32_t i = order_[j];
        store(bytes + 4 * j, i);
        store(bytes + 4 * (k + j), in[i]);
      }
      // Every entry not kept is error (and residual); the kept ones are sent exactly.
      stats.error_norm2 = stats.input_norm2;
      for (std::size_t j = 0; j < k; ++j) {
        const float v = in[order_[j]];
        stats.error_norm2 -= static_cast<double>(v) * v;
        if (p != nullptr) p[order_[j]] = 0.0f;
      }
      stats.error_norm2 = std::max(stats.error_norm2, 0.0);
      break;
    }
    case CodecKind::kRandomK: {
      const std::uint64_t stream = random_stream(iteration);
      stats.error_norm2 = stats.input_norm2;
      for (std::size_t j = 0; j < kept_; ++j) {
        const std::size_t i = random_index(stream, j);
        store(bytes + 4 * j, in[i]);
        stats.error_norm2 -= static_cast<double>(in[i]) * in[i];
        if (p != nullptr) p[i] = 0.0f;
      }
      stats.error_norm2 = std::max(stats.error_norm2, 0.0);
      break;
    }
  }
  stats.error_norm2 += total(error2);  // the entries account() saw (none for top-k, random-k)
  return stats;
}

void Codec::mask_sent(std::span<const std::byte> in, std::span<float> values,
                      std::uint64_t iteration) const {
  GRADMESH_CHECK_EQ(values.size(), floats_, "Codec::mask_sent: size");
  check(in);
  if (kind_ == CodecKind::kTopK) {
    for (std::size_t j = 0; j < kept_; ++j) values[load<std::uint32_t>(in.data() + 4 * j)] = 0.0f;
  } else if (kind_ == CodecKind::kRandomK) {
    const std::uint64_t stream = random_stream(iteration);
    for (std::size_t j = 0; j < kept_; ++j) values[random_index(stream, j)] = 0.0f;
  } else {
    std::fill(values.begin(), values.end(), 0.0f);
  }
}

void Codec::check(std::span<const std::byte> in) const {
  if (in.size() != encoded_bytes()) {
    throw ProtocolError(std::string(codec_name(kind_)) + " encoding of " + std::to_string(floats_) +
                        " floats: " + std::to_string(in.size()) + " bytes, expected " +
                        std::to_string(encoded_bytes()));
  }
  if (kind_ != CodecKind::kTopK) return;
  const std::byte* bytes = in.data();
  std::uint64_t previous = 0;
  for (std::size_t j = 0; j < kept_; ++j) {
    const std::uint32_t i = load<std::uint32_t>(bytes + 4 * j);
    if (i >= floats_ || (j > 0 && i <= previous)) {
      throw ProtocolError("topk encoding of " + std::to_string(floats_) + " floats: index " +
                          std::to_string(i) + " at entry " + std::to_string(j) +
                          (i >= floats_ ? " is out of range" : " is not ascending"));
    }
    previous = i;
  }
}

template <bool kAdd>
void Codec::decode_into(std::span<const std::byte> in, std::span<float> out,
                        std::uint64_t iteration) const {
  GRADMESH_CHECK_EQ(out.size(), floats_, "Codec::decode: output size");
  check(in);  // before anything is written: a malformed message changes nothing
  const std::size_t n = floats_;
  const std::byte* bytes = in.data();
  const auto put = [&out](std::size_t i, float v) {
    if constexpr (kAdd) {
      out[i] += v;
    } else {
      out[i] = v;
    }
  };
  switch (kind_) {
    case CodecKind::kNone:
      for (std::size_t i = 0; i < n; ++i) put(i, load<float>(bytes + 4 * i));
      break;
    case CodecKind::kFp16:
    case CodecKind::kBf16:
      if constexpr (kAdd) {
        decode_add_half_block(kind_, 1.0f, bytes, out);
      } else {
        decode_half_block(kind_, 1.0f, bytes, out);
      }
      break;
    case CodecKind::kInt8: {
      const std::size_t chunks = int8_chunks(n);
      const auto* values = reinterpret_cast<const std::int8_t*>(bytes + 4 * chunks);
      for (std::size_t c = 0; c < chunks; ++c) {
        const float scale = load<float>(bytes + 4 * c);
        const std::size_t end = std::min(n, (c + 1) * kInt8ChunkFloats);
        for (std::size_t i = c * kInt8ChunkFloats; i < end; ++i) {
          put(i, static_cast<float>(values[i]) * scale);
        }
      }
      break;
    }
    case CodecKind::kTopK: {
      const std::size_t k = kept_;
      if constexpr (!kAdd) std::fill(out.begin(), out.end(), 0.0f);
      for (std::size_t j = 0; j < k; ++j) {
        out[load<std::uint32_t>(bytes + 4 * j)] += load<float>(bytes + 4 * (k + j));
      }
      break;
    }
    case CodecKind::kRandomK: {
      if constexpr (!kAdd) std::fill(out.begin(), out.end(), 0.0f);
      const std::uint64_t stream = random_stream(iteration);
      for (std::size_t j = 0; j < kept_; ++j) {
        out[random_index(stream, j)] += load<float>(bytes + 4 * j);
      }
      break;
    }
  }
}

void Codec::decode(std::span<const std::byte> in, std::span<float> out,
                   std::uint64_t iteration) const {
  decode_into<false>(in, out, iteration);
}

void Codec::decode_add(std::span<const std::byte> in, std::span<float> sum,
                       std::uint64_t iteration) const {
  decode_into<true>(in, sum, iteration);
}

void Codec::save_state(engine::StateWriter& out) { out.write_floats(residual_); }

void Codec::load_state(engine::StateReader& in) { in.read_floats(residual_); }

}  // namespace gradmesh::sync::compress
