#pragma once
// A test backend with the gradient-codec kernels of tasks/backend.h on host memory, each written
// from its definition there: the emulated device of tests/tasks/ (a Model on it takes the device
// path) that a compress::DeviceCodec can run on, so the device codec and the schemes that use it
// are tested on any machine.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>

#include "sync/compress/codec.h"
#include "sync/compress/half/half_block.h"
#include "tasks/random.h"
#include "tests/tasks/emulated_device.h"

namespace gradmesh::testing {

/// The codec kernels on host memory, each written from its definition in tasks/backend.h.
class ReferenceCodecDevice final : public tasks::testing::EmulatedDevice {
 public:
  /// Encodes run (encode_half, encode_int8, top_k, random_k's gathers): that a scheme used them.
  std::atomic<std::size_t> encodes = 0;

  void sum_squares(const float* x, std::size_t n, double* out) override {
    double total = 0;
    for (std::size_t i = 0; i < n; ++i) total += static_cast<double>(x[i]) * x[i];
    *out = total;
  }
  void encode_half(tasks::HalfFormat format, float* p, std::size_t n, std::uint16_t* out) override {
    ++encodes;
    for (std::size_t i = 0; i < n; ++i) {
      out[i] = format == tasks::HalfFormat::kFp16 ? sync::compress::float_to_fp16(p[i])
                                                  : sync::compress::float_to_bf16(p[i]);
      p[i] -= decoded(format, out[i]);
    }
  }
  void decode_half(tasks::HalfFormat format, const std::uint16_t* in, std::size_t n, float* out,
                   bool add) override {
    for (std::size_t i = 0; i < n; ++i)
      out[i] = add ? out[i] + decoded(format, in[i]) : decoded(format, in[i]);
  }
  void encode_int8(float* p, std::size_t n, std::size_t chunk, float* scales,
                   std::int8_t* values) override {
    ++encodes;
    for (std::size_t c = 0; c * chunk < n; ++c) {
      const std::size_t begin = c * chunk, end = std::min(n, begin + chunk);
      float largest = 0;
      for (std::size_t i = begin; i < end; ++i) largest = std::max(largest, std::fabs(p[i]));
      const float scale = largest / 127.0f, inverse = scale > 0 ? 1.0f / scale : 0.0f;
      scales[c] = scale;
      for (std::size_t i = begin; i < end; ++i) {
        values[i] =
            static_cast<std::int8_t>(std::clamp(std::nearbyint(p[i] * inverse), -127.f, 127.f));
        p[i] -= static_cast<float>(values[i]) * scale;
      }
    }
  }
  void decode_int8(const float* scales, const std::int8_t* values, std::size_t n, std::size_t chunk,
                   float* out, bool add) override {
    for (std::size_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(values[i]) * scales[i / chunk];
      out[i] = add ? out[i] + v : v;
    }
  }
  std::size_t top_k_scratch_bytes(std::size_t n) override { return 4 * n; }
  void top_k(const float* p, std::size_t n, std::size_t k, std::uint32_t* indices,
             std::byte* scratch) override {
    auto* order = reinterpret_cast<std::uint32_t*>(scratch);
    std::iota(order, order + n, 0u);
    std::stable_sort(order, order + n, [p](std::uint32_t a, std::uint32_t b) {
      return std::fabs(p[a]) > std::fabs(p[b]);
    });
    std::copy(order, order + k, indices);
    std::sort(indices, indices + k);
  }
  void random_k(std::uint64_t stream, std::size_t n, std::size_t k,
                std::uint32_t* indices) override {
    for (std::size_t j = 0; j < k; ++j) {
      tasks::SplitMix64 rng(tasks::derive_seed(stream, j));
      const std::size_t lo = j * n / k, hi = (j + 1) * n / k;
      indices[j] = static_cast<std::uint32_t>(lo + rng.next_below(hi - lo));
    }
  }
  void gather_and_zero(float* p, const std::uint32_t* indices, std::size_t k,
                       float* values) override {
    ++encodes;
    for (std::size_t j = 0; j < k; ++j) {
      values[j] = p[indices[j]];
      p[indices[j]] = 0.0f;
    }
  }
  void scatter_add(const std::uint32_t* indices, const float* values, std::size_t k,
                   float* out) override {
    for (std::size_t j = 0; j < k; ++j) out[indices[j]] += values[j];
  }

 private:
  static float decoded(tasks::HalfFormat format, std::uint16_t h) {
    return format == tasks::HalfFormat::kFp16 ? sync::compress::fp16_to_float(h)
                                              : sync::compress::bf16_to_float(h);
  }
};

}  // namespace gradmesh::testing
