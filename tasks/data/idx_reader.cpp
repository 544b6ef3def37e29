#include "tasks/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include "engine/error.h"

namespace gradmesh::tasks {
namespace {

constexpr std::size_t kReadChunk = 1U << 16;  // bytes read per gzread round

std::string hex32(std::uint32_t v) {
  std::array<char, 16> buf{};
  std::snprintf(buf.data(), buf.size(), "0x%08X", v);
  return buf.data();
}

/// An open gzFile that closes itself; reads fail with DataError naming the path.
class GzReader {
 public:
  explicit GzReader(const std::filesystem::path& path) : path_(path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      throw DataError(path_.string() + ": no such file");
    }
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr) throw DataError(path_.string() + ": cannot open for reading");
    gzbuffer(file_, 1U << 17);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;
  ~GzReader() { gzclose(file_); }

  /// Reads up to n bytes into out; returns how many came (fewer only at end of data).
  std::uint64_t read_some(void* out, std::uint64_t n) {
    auto* dst = static_cast<unsigned char*>(out);
    std::uint64_t got = 0;
    while (got < n) {
      const auto chunk = static_cast<unsigned>(std::min<std::uint64_t>(n - got, 1U << 30));
      const int r = gzread(file_, dst + got, chunk);
      if (r < 0) {
        int errnum = 0;
        const char* msg = gzerror(file_, &errnum);
        throw DataError(path_.string() + ": read error: " + (msg != nullptr ? msg : "unknown"));
      }
      if (r == 0) break;
      got += static_cast<std::uint64_t>(r);
    }
    return got;
  }

  /// Reads exactly n bytes of `what`, else DataError saying expected vs got.
  void read_exact(void* out, std::uint64_t n, const char* what) {
    const std::uint64_t got = read_some(out, n);
    if (got != n) {
      throw DataError(path_.string() + ": truncated " + what + ": expected " + std::to_string(n) +
                      " bytes, got " + std::to_string(got));
    }
  }

  std::uint32_t read_be32(const char* what) {
    std::array<unsigned char, 4> b{};
    read_exact(b.data(), b.size(), what);
    return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) |
           std::uint32_t{b[3]};
  }

  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
  gzFile file_ = nullptr;
};

void check_magic(const GzReader& in, std::uint32_t expected, std::uint32_t found,
                 const char* what) {
  if (found != expected) {
    throw DataError(in.path().string() + ": bad IDX magic for " + what + ": expected " +
                    hex32(expected) + ", found " + hex32(found));
  }
}

}  // namespace

IdxImages read_idx_images(const std::filesystem::path& path) {
  GzReader in(path);
  check_magic(in, kIdxImagesMagic, in.read_be32("header (magic)"), "images");
  const std::uint32_t count = in.read_be32("header (dimensions)");
  const std::uint32_t rows = in.read_be32("header (dimensions)");
  const std::uint32_t cols = in.read_be32("header (dimensions)");
  const std::uint64_t payload = std::uint64_t{count} * rows * cols;
  if (rows == 0 || cols == 0 || rows > kIdxMaxSide || cols > kIdxMaxSide ||
      payload > kIdxMaxPayloadBytes) {
    throw DataError(path.string() + ": absurd IDX image dimensions " + std::to_string(count) +
                    " x " + std::to_string(rows) + " x " + std::to_string(cols) +
                    " (expected sides in [1, " + std::to_string(kIdxMaxSide) + "] and at most " +
                    std::to_string(kIdxMaxPayloadBytes) + " bytes)");
  }
  IdxImages images;
  images.count = count;
  images.rows = rows;
  images.cols = cols;

  // Stream through a small byte buffer so the file is never held twice in memory, and grow the
  // output as data arrives so a corrupt header claiming gigabytes fails as "truncated" instead
  // of allocating them up front.
  std::vector<unsigned char> buf(kReadChunk);
  std::uint64_t done = 0;
  while (done < payload) {
    const std::uint64_t want = std::min<std::uint64_t>(kReadChunk, payload - done);
    const std::uint64_t got = in.read_some(buf.data(), want);
    images.pixels.resize(static_cast<std::size_t>(done + got));
    for (std::uint64_t i = 0; i < got; ++i) {
      images.pixels[static_cast<std::size_t>(done + i)] = static_cast<float>(buf[i]) / 255.0f;
    }
    done += got;
    if (got < want) {
      throw DataError(path.string() + ": truncated image data: expected " +
                      std::to_string(payload) + " bytes after the header, got " +
                      std::to_string(done));
    }
  }
  return images;
}

std::vector<std::uint8_t> read_idx_labels(const std::filesystem::path& path) {
  GzReader in(path);
  check_magic(in, kIdxLabelsMagic, in.read_be32("header (magic)"), "labels");
  const std::uint32_t count = in.read_be32("header (dimensions)");
  std::vector<std::uint8_t> labels;
  std::uint64_t got = 0;
  while (got < count) {  // grow as data arrives (see read_idx_images)
    const std::uint64_t want = std::min<std::uint64_t>(kReadChunk, count - got);
    labels.resize(static_cast<std::size_t>(got + want));
    const std::uint64_t n = in.read_some(labels.data() + got, want);
    got += n;
    if (n < want) break;
  }
  if (got != count) {
    throw DataError(path.string() + ": truncated label data: expected " + std::to_string(count) +
                    " bytes after the header, got " + std::to_string(got));
  }
  return labels;
}

}  // namespace gradmesh::tasks
