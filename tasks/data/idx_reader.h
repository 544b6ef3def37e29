#pragma once
// Reader of IDX files, the format of MNIST and Fashion-MNIST (LeCun et al.): a big-endian header
// (magic 0x00000803 for 3-d unsigned-byte images, 0x00000801 for 1-d unsigned-byte labels), one
// big-endian uint32 per dimension, then the bytes row-major. Gzipped (.gz) or raw: both are read
// through zlib's gzread, which passes raw files through unchanged.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

namespace gradmesh::tasks {

/// Magic number of an IDX file of 3-d unsigned-byte images (count x rows x cols).
inline constexpr std::uint32_t kIdxImagesMagic = 0x00000803;
/// Magic number of an IDX file of 1-d unsigned-byte labels.
inline constexpr std::uint32_t kIdxLabelsMagic = 0x00000801;
/// Largest image side accepted; anything larger is taken for a corrupt header.
inline constexpr std::uint32_t kIdxMaxSide = 1U << 14;
/// Largest payload accepted, in bytes (4 GiB); anything larger is taken for a corrupt header.
inline constexpr std::uint64_t kIdxMaxPayloadBytes = 1ULL << 32;

/// Images of an IDX file: count x (rows * cols) floats, row-major, pixel byte / 255 in [0, 1].
struct IdxImages {
  std::size_t count = 0, rows = 0, cols = 0;
  std::vector<float> pixels;
};

/// Reads an IDX images file (gzipped or raw). Thread safety: reentrant (no shared state).
/// Throws gradmesh::DataError, whose message names `path`, if the file is missing or unreadable,
/// its magic is not 0x00000803 (expected and found printed in hex), its dimensions are absurd
/// (a zero or > kIdxMaxSide side, or a payload > kIdxMaxPayloadBytes), or it is truncated
/// (expected and received byte counts printed).
IdxImages read_idx_images(const std::filesystem::path& path);

/// Reads an IDX labels file (gzipped or raw): one byte a label. Thread safety and errors as
/// read_idx_images, with magic 0x00000801.
std::vector<std::uint8_t> read_idx_labels(const std::filesystem::path& path);

}  // namespace gradmesh::tasks
