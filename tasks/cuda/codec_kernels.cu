// The gradient-codec kernels of the CUDA backend (codec_kernels.h; issue 28 item 1). Each writes
// the bits sync/compress/codec.cpp writes on the host: the 16-bit conversions are the host's bit
// manipulations, and every floating-point operation is one _rn intrinsic, so nvcc fuses nothing
// into an FMA that the host rounds twice. Sources as codec.h: error feedback (Karimireddy et al.,
// ICML'19, Alg. 2), top-k and random-k with memory (Stich et al., NeurIPS'18, Alg. 1), per-chunk
// int8 (BytePS's compressor plugins).

#include <cub/device/device_radix_sort.cuh>

#include <climits>

#include "tasks/cuda/codec_kernels.h"
#include "tasks/cuda/launch.cuh"

namespace gradmesh::tasks::cuda::kernels {
namespace {

using detail::blocks_for;
using detail::kThreads;
using detail::launched;

// ---- the host's conversions (codec.cpp), bit for bit ----

__device__ std::uint16_t float_to_fp16(float value) {
  const std::uint32_t x = __float_as_uint(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u | static_cast<std::uint16_t>((abs >> 13) & 0x3ffu);
  if (abs == 0x7f800000u) return sign | 0x7c00u;
  if (abs >= 0x477ff000u) return sign | 0x7bffu;  // saturate at 65504
  if (abs >= 0x38800000u) {
    std::uint32_t h = (abs - 0x38000000u) >> 13;
    const std::uint32_t rest = abs & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;
    return sign | static_cast<std::uint16_t>(h);
  }
  const std::uint32_t e = abs >> 23;
  if (e < 102) return sign;
  const std::uint32_t m = (abs & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126 - e;
  std::uint32_t h = m >> shift;
  const std::uint32_t rest = m & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (h & 1u) != 0)) ++h;
  return sign | static_cast<std::uint16_t>(h);
}

__device__ float fp16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = __fmul_rn(static_cast<float>(mantissa), 0x1p-24f);  // exact
    return __uint_as_float(__float_as_uint(magnitude) | sign);
  }
  if (exponent == 31) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  return __uint_as_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

__device__ std::uint16_t float_to_bf16(float value) {
  const std::uint32_t x = __float_as_uint(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  const std::uint32_t bias = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + bias) >> 16);
}

__device__ float bf16_to_float(std::uint16_t bits) {
  return __uint_as_float(static_cast<std::uint32_t>(bits) << 16);
}

__device__ float half_to_float(bool bf16, std::uint16_t bits) {
  return bf16 ? bf16_to_float(bits) : fp16_to_float(bits);
}

// ---- SplitMix64 (tasks/random.h), for random-k's indices ----

__device__ std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

__device__ std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  return mix(seed ^ mix(stream + 0x632BE59BD9B4E019ULL));
}

__device__ std::uint64_t next_below(std::uint64_t& state, std::uint64_t bound) {
  if (bound == 0) return 0;
  const std::uint64_t limit = ULLONG_MAX - (ULLONG_MAX % bound);
  state += 0x9E3779B97F4A7C15ULL;
  std::uint64_t r = mix(state);
  while (r >= limit) {
    state += 0x9E3779B97F4A7C15ULL;
    r = mix(state);
  }
  return r % bound;
}

// ---- kernels ----

__global__ void accumulate_kernel(float* sum, const float* x, std::size_t n) {
  GM_FOR(i, n) sum[i] = __fadd_rn(sum[i], x[i]);
}

// Block b's share of sum x^2 (a fixed grid and tree: the same result every run).
__global__ void square_partials_kernel(const float* x, std::size_t n, double* partials) {
  __shared__ double partial[kThreads];
  double acc = 0.0;
  GM_FOR(i, n) {
    const double v = x[i];
    acc = __fma_rn(v, v, acc);
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = partial[0];
}

__global__ void sum_partials_kernel(const double* partials, unsigned count, double* out) {
  double total = 0.0;
  for (unsigned b = 0; b < count; ++b) total += partials[b];
  *out = total;
}

__global__ void encode_half_kernel(bool bf16, float* p, std::size_t n, std::uint16_t* out) {
  GM_FOR(i, n) {
    const float v = p[i];
    const std::uint16_t h = bf16 ? float_to_bf16(v) : float_to_fp16(v);
    out[i] = h;
    p[i] = __fsub_rn(v, half_to_float(bf16, h));
  }
}

__global__ void decode_half_kernel(bool bf16, const std::uint16_t* in, std::size_t n, float* out,
                                   bool add) {
  GM_FOR(i, n) {
    const float v = half_to_float(bf16, in[i]);
    out[i] = add ? __fadd_rn(out[i], v) : v;
  }
}

// One block per chunk: the chunk's largest magnitude (a NaN ignored, as the host's max), its
// scale, then each float's rounding and error.
__global__ void encode_int8_kernel(float* p, std::size_t n, std::size_t chunk, float* scales,
                                   std::int8_t* values) {
  __shared__ float partial[kThreads];
  const std::size_t begin = static_cast<std::size_t>(blockIdx.x) * chunk;
  const std::size_t end = begin + chunk < n ? begin + chunk : n;
  float largest = 0.0f;
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float a = fabsf(p[i]);
    if (a > largest) largest = a;
  }
  partial[threadIdx.x] = largest;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half && partial[threadIdx.x + half] > partial[threadIdx.x]) {
      partial[threadIdx.x] = partial[threadIdx.x + half];
    }
    __syncthreads();
  }
  const float scale = __fdiv_rn(partial[0], 127.0f);
  const float inverse = scale > 0 ? __fdiv_rn(1.0f, scale) : 0.0f;
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float v = p[i];
    const float y = fminf(fmaxf(__fmul_rn(v, inverse), -127.0f), 127.0f);
    const int q = __float2int_rn(y);
    values[i] = static_cast<std::int8_t>(q);
    p[i] = __fsub_rn(v, __fmul_rn(static_cast<float>(q), scale));
  }
}

__global__ void decode_int8_kernel(const float* scales, const std::int8_t* values, std::size_t n,
                                   std::size_t chunk, float* out, bool add) {
  GM_FOR(i, n) {
    const float v = __fmul_rn(static_cast<float>(values[i]), scales[i / chunk]);
    out[i] = add ? __fadd_rn(out[i], v) : v;
  }
}

__global__ void magnitude_keys_kernel(const float* p, std::size_t n, std::uint32_t* keys,
                                      std::uint32_t* order) {
  GM_FOR(i, n) {
    keys[i] = __float_as_uint(p[i]) & 0x7fffffffu;
    order[i] = static_cast<std::uint32_t>(i);
  }
}

__global__ void random_k_kernel(std::uint64_t stream_seed, std::size_t n, std::size_t k,
                                std::uint32_t* indices) {
  GM_FOR(j, k) {
    const std::size_t lo = j * n / k, hi = (j + 1) * n / k;
    std::uint64_t state = derive_seed(stream_seed, j);
    indices[j] = static_cast<std::uint32_t>(lo + next_below(state, hi - lo));
  }
}

__global__ void gather_and_zero_kernel(float* p, const std::uint32_t* indices, std::size_t k,
                                       float* values) {
  GM_FOR(j, k) {
    values[j] = p[indices[j]];
    p[indices[j]] = 0.0f;
  }
}

__global__ void scatter_add_kernel(const std::uint32_t* indices, const float* values, std::size_t k,
                                   float* out) {
  GM_FOR(j, k) out[indices[j]] = __fadd_rn(out[indices[j]], values[j]);
}

constexpr std::size_t kAlign = 256;

std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

/// CUB's storage for both sorts of top_k over n items.
std::size_t cub_bytes(std::size_t n) {
  std::size_t pairs = 0, keys = 0;
  const int items = static_cast<int>(n);
  cub::DeviceRadixSort::SortPairsDescending(
      nullptr, pairs, static_cast<std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr),
      static_cast<std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr), items);
  cub::DeviceRadixSort::SortKeys(nullptr, keys, static_cast<std::uint32_t*>(nullptr),
                                 static_cast<std::uint32_t*>(nullptr), items);
  return pairs > keys ? pairs : keys;
}

}  // namespace

cudaError_t accumulate(float* sum, const float* x, std::size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  accumulate_kernel<<<blocks_for(n), kThreads, 0, stream>>>(sum, x, n);
  return launched();
}

cudaError_t sum_squares(const float* x, std::size_t n, double* partials, double* out,
                        cudaStream_t stream) {
  const unsigned blocks = blocks_for(n, kSquarePartials);
  square_partials_kernel<<<blocks, kThreads, 0, stream>>>(x, n, partials);
  if (const cudaError_t e = launched(); e != cudaSuccess) return e;
  sum_partials_kernel<<<1, 1, 0, stream>>>(partials, blocks, out);
  return launched();
}

cudaError_t encode_half(bool bf16, float* p, std::size_t n, std::uint16_t* out,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  encode_half_kernel<<<blocks_for(n), kThreads, 0, stream>>>(bf16, p, n, out);
  return launched();
}

cudaError_t decode_half(bool bf16, const std::uint16_t* in, std::size_t n, float* out, bool add,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  decode_half_kernel<<<blocks_for(n), kThreads, 0, stream>>>(bf16, in, n, out, add);
  return launched();
}

cudaError_t encode_int8(float* p, std::size_t n, std::size_t chunk, float* scales,
                        std::int8_t* values, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (chunk == 0 || chunk > 4096) return cudaErrorInvalidValue;
  const std::size_t chunks = (n + chunk - 1) / chunk;
  if (chunks > 0x7fffffffu) return cudaErrorInvalidValue;
  encode_int8_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(p, n, chunk, scales,
                                                                             values);
  return launched();
}

cudaError_t decode_int8(const float* scales, const std::int8_t* values, std::size_t n,
                        std::size_t chunk, float* out, bool add, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (chunk == 0) return cudaErrorInvalidValue;
  decode_int8_kernel<<<blocks_for(n), kThreads, 0, stream>>>(scales, values, n, chunk, out, add);
  return launched();
}

std::size_t top_k_scratch_bytes(std::size_t n) {
  return 4 * aligned(4 * n) + aligned(cub_bytes(n));
}

cudaError_t top_k(const float* p, std::size_t n, std::size_t k, std::uint32_t* indices,
                  std::byte* scratch, cudaStream_t stream) {
  if (n == 0 || k == 0) return cudaSuccess;
  if (n > static_cast<std::size_t>(INT_MAX) || k > n) return cudaErrorInvalidValue;
  auto* keys_in = reinterpret_cast<std::uint32_t*>(scratch);
  auto* keys_out = reinterpret_cast<std::uint32_t*>(scratch + aligned(4 * n));
  auto* order_in = reinterpret_cast<std::uint32_t*>(scratch + 2 * aligned(4 * n));
  auto* order_out = reinterpret_cast<std::uint32_t*>(scratch + 3 * aligned(4 * n));
  std::byte* temp = scratch + 4 * aligned(4 * n);
  std::size_t temp_bytes = cub_bytes(n);
  magnitude_keys_kernel<<<blocks_for(n), kThreads, 0, stream>>>(p, n, keys_in, order_in);
  if (const cudaError_t e = launched(); e != cudaSuccess) return e;
  // Stable: equal magnitudes keep their ascending indices (Codec's tie to the lower index).
  if (const cudaError_t e =
          cub::DeviceRadixSort::SortPairsDescending(temp, temp_bytes, keys_in, keys_out, order_in,
                                                    order_out, static_cast<int>(n), 0, 32, stream);
      e != cudaSuccess) {
    return e;
  }
  return cub::DeviceRadixSort::SortKeys(temp, temp_bytes, order_out, indices, static_cast<int>(k),
                                        0, 32, stream);
}

cudaError_t random_k(std::uint64_t stream_seed, std::size_t n, std::size_t k,
                     std::uint32_t* indices, cudaStream_t stream) {
  if (k == 0) return cudaSuccess;
  random_k_kernel<<<blocks_for(k), kThreads, 0, stream>>>(stream_seed, n, k, indices);
  return launched();
}

cudaError_t gather_and_zero(float* p, const std::uint32_t* indices, std::size_t k, float* values,
                            cudaStream_t stream) {
  if (k == 0) return cudaSuccess;
  gather_and_zero_kernel<<<blocks_for(k), kThreads, 0, stream>>>(p, indices, k, values);
  return launched();
}

cudaError_t scatter_add(const std::uint32_t* indices, const float* values, std::size_t k,
                        float* out, cudaStream_t stream) {
  if (k == 0) return cudaSuccess;
  scatter_add_kernel<<<blocks_for(k), kThreads, 0, stream>>>(indices, values, k, out);
  return launched();
}

}  // namespace gradmesh::tasks::cuda::kernels
