#pragma once
// gradmesh's own small PRNG and shuffle, so that sharding, shuffling and weight init give the same
// numbers on every node whatever its standard library (std::uniform_int_distribution and
// std::shuffle are implementation-defined).

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace gradmesh::tasks {

/// SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA'14):
/// a 64-bit state, one add and a finalizer per number. Good enough for shuffling and weight init,
/// not cryptographic. Thread safety: none; one generator per thread. Never throws.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}

  /// The next 64 uniformly distributed bits.
  constexpr std::uint64_t next() noexcept {
    state_ += 0x9E3779B97F4A7C15ULL;
    return mix(state_);
  }

  /// Uniform integer in [0, bound), unbiased (rejection of the short top range). bound must be
  /// > 0; for bound == 0 returns 0.
  constexpr std::uint64_t next_below(std::uint64_t bound) noexcept {
    if (bound == 0) return 0;
    // Values >= limit would favour the low residues; limit is the largest multiple of bound.
    const std::uint64_t limit = UINT64_MAX - (UINT64_MAX % bound);
    std::uint64_t r = next();
    while (r >= limit) r = next();
    return r % bound;
  }

  /// Uniform float in [0, 1), from the top 24 bits (every value exactly representable).
  constexpr float next_float() noexcept {
    return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
  }

  /// The SplitMix64 finalizer: a bijective 64-bit mixer.
  static constexpr std::uint64_t mix(std::uint64_t z) noexcept {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t state_;
};

/// A seed derived from a base seed and a stream id (a layer index, an epoch, a rank): distinct
/// streams get unrelated seeds, and the result is the same on every node.
constexpr std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) noexcept {
  return SplitMix64::mix(seed ^ SplitMix64::mix(stream + 0x632BE59BD9B4E019ULL));
}

/// Fisher–Yates shuffle of `values` in place with `rng` (Knuth's Algorithm P, from the back).
/// Identical output on every platform for the same generator state. No allocation.
template <typename T>
void fisher_yates_shuffle(std::span<T> values, SplitMix64& rng) noexcept {
  for (std::size_t i = values.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(rng.next_below(i));
    using std::swap;
    swap(values[i - 1], values[j]);
  }
}

}  // namespace gradmesh::tasks
