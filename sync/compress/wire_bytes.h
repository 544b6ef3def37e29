#pragma once
// Reading and writing a compressor's little-endian wire values at any alignment (memcpy), and the
// squared norms an encode reports (EncodeStats), summed in four interleaved parts so that the
// additions do not wait on each other (the same order, hence the same bits, on every path).

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gradmesh::sync::compress::detail {

static_assert(std::endian::native == std::endian::little,
              "the compressors' wire layouts are little-endian and written with memcpy");

template <typename T>
[[nodiscard]] T load(const std::byte* at) noexcept {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

template <typename T>
void store(std::byte* at, T value) noexcept {
  std::memcpy(at, &value, sizeof(T));
}

/// `value` negated when `negative`, without a branch (a sign taken from random data mispredicts
/// half the time): the same bits as -value.
[[nodiscard]] inline float negate_if(bool negative, float value) noexcept {
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(value) ^
                              (static_cast<std::uint32_t>(negative) << 31));
}

/// sum_i v_i^2 in double, entry i into part i % 4. Four named parts, not an array indexed by
/// i % 4: the compiler keeps them in registers (an indexed array goes through memory, each add
/// waiting on the store four entries back).
class Norm2 {
 public:
  void add(std::size_t i, float v) noexcept {
    const double square = static_cast<double>(v) * v;
    switch (i & 3u) {
      case 0:
        p0_ += square;
        break;
      case 1:
        p1_ += square;
        break;
      case 2:
        p2_ += square;
        break;
      default:
        p3_ += square;
    }
  }
  [[nodiscard]] double total() const noexcept { return (p0_ + p1_) + (p2_ + p3_); }

 private:
  double p0_ = 0, p1_ = 0, p2_ = 0, p3_ = 0;
};

}  // namespace gradmesh::sync::compress::detail
