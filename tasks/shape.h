#pragma once
// The shape of one sample's activations: channels x height x width. A batch of N samples is
// stored N x C x H x W, contiguous and row-major (NCHW), behind the layers' float pointers.

#include <cstddef>
#include <string>

namespace gradmesh::tasks {

/// Per-sample activation shape C x H x W (all counts of floats). A flat vector of n features is
/// n x 1 x 1 (what a dense layer outputs). Plain value type; never throws.
struct Shape {
  std::size_t channels = 0;
  std::size_t height = 1;
  std::size_t width = 1;

  /// A flat shape of n features: n x 1 x 1.
  [[nodiscard]] static constexpr Shape flat(std::size_t n) noexcept { return Shape{n, 1, 1}; }

  /// Floats of one sample: C * H * W.
  [[nodiscard]] constexpr std::size_t size() const noexcept { return channels * height * width; }
  /// Whether the shape is C x 1 x 1 (a vector, as a dense layer takes and gives).
  [[nodiscard]] constexpr bool is_flat() const noexcept { return height == 1 && width == 1; }

  friend constexpr bool operator==(const Shape&, const Shape&) = default;
};

/// "C x H x W" as "1x28x28".
[[nodiscard]] inline std::string to_string(const Shape& s) {
  return std::to_string(s.channels) + "x" + std::to_string(s.height) + "x" +
         std::to_string(s.width);
}

}  // namespace gradmesh::tasks
