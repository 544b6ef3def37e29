#include "apps/recovery/checkpoint_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <system_error>

#include "engine/error.h"

namespace gradmesh::app {

static_assert(std::endian::native == std::endian::little,
              "checkpoint files are little-endian; a big-endian host needs byte swaps here");

namespace {

constexpr std::array<char, 8> kMagic{'G', 'M', 'C', 'K', 'P', 'T', '\r', '\n'};
constexpr std::size_t kPrefixBytes = 8 + 4 + 4 + 8;  // magic, version, reserved, body length
constexpr const char* kSuffix = ".gmckpt";

std::uint32_t crc32_of(std::span<const std::byte> bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed large buffers in pieces.
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::size_t piece = std::min<std::size_t>(bytes.size() - at, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(piece));
    at += piece;
  }
  return static_cast<std::uint32_t>(crc);
}

std::string system_reason() { return std::error_code(errno, std::generic_category()).message(); }

}  // namespace

// ---- the file ----

Checkpoint decode_checkpoint(std::span<const std::byte> bytes, const std::string& source) {
  if (bytes.size() < kPrefixBytes + 4 ||
      std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    throw CheckpointError(source + ": not a gradmesh checkpoint (" + std::to_string(bytes.size()) +
                          " bytes, no \"GMCKPT\" magic)");
  }
  std::uint32_t version = 0;
  std::uint64_t body_bytes = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&body_bytes, bytes.data() + 16, 8);
  if (version != kCheckpointFormatVersion) {
    throw CheckpointError(source + ": checkpoint format version " + std::to_string(version) +
                          ", this gradmesh reads version " +
                          std::to_string(kCheckpointFormatVersion));
  }
  if (body_bytes != bytes.size() - kPrefixBytes - 4) {
    throw CheckpointError(source + ": torn: the header announces " +
                          std::to_string(kPrefixBytes + body_bytes + 4) + " bytes, the file has " +
                          std::to_string(bytes.size()));
  }
  std::uint32_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - 4, 4);
  const std::uint32_t computed = crc32_of(bytes.first(bytes.size() - 4));
  if (stored != computed) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "crc32 %08x, the bytes give %08x", stored, computed);
    throw CheckpointError(source + ": corrupt: stored " + buf);
  }
  StateReader in(bytes.subspan(kPrefixBytes, body_bytes), source);
  Checkpoint out;
  out.header.config_fingerprint = in.read_u64();
  out.header.rank = in.read_u64();
  out.header.nodes = in.read_u64();
  out.header.iteration = in.read_u64();
  out.header.strategy = in.read_string();
  out.header.config_text = in.read_string();
  const std::uint64_t count = in.read_u64();
  for (std::uint64_t i = 0; i < count; ++i) {
    std::string name = in.read_string();
    const auto section = in.read_bytes(in.read_u64());
    if (!out.sections.emplace(name, std::vector<std::byte>(section.begin(), section.end()))
             .second) {
      throw CheckpointError(source + ": section '" + name + "' twice");
    }
  }
  in.expect_end();
  return out;
}

void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  const std::filesystem::path temporary = path.string() + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw CheckpointError("cannot create " + temporary.string() + ": " + system_reason());
  std::size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = system_reason();
      ::close(fd);
      throw CheckpointError("cannot write " + temporary.string() + ": " + why);
    }
    at += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const std::string why = system_reason();
    ::close(fd);
    throw CheckpointError("cannot fsync " + temporary.string() + ": " + why);
  }
  if (::close(fd) != 0)
    throw CheckpointError("cannot close " + temporary.string() + ": " + system_reason());
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    throw CheckpointError("cannot rename " + temporary.string() + " to " + path.string() + ": " +
                          system_reason());
  }
  // The rename is durable once the directory entry is.
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0)
    throw CheckpointError("cannot open folder " + dir.string() + ": " + system_reason());
  const int synced = ::fsync(dir_fd);
  const std::string why = synced != 0 ? system_reason() : std::string();
  ::close(dir_fd);
  if (synced != 0) throw CheckpointError("cannot fsync folder " + dir.string() + ": " + why);
}

std::vector<std::byte> read_whole_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw CheckpointError("cannot open " + path.string());
  const std::streamsize size = in.tellg();
  std::vector<std::byte> bytes(static_cast<std::size_t>(std::max<std::streamsize>(size, 0)));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size)) {
    throw CheckpointError("cannot read " + path.string());
  }
  return bytes;
}

// ---- CheckpointSet ----

void CheckpointSet::add(std::string name, Checkpointable& state) {
  GRADMESH_CHECK(!name.empty(), "CheckpointSet::add: empty section name");
  for (const auto& [existing, _] : states_) {
    GRADMESH_CHECK(existing != name, "CheckpointSet::add: section '" + name + "' added twice");
  }
  states_.emplace_back(std::move(name), &state);
}

void CheckpointSet::save(const CheckpointHeader& header, std::vector<std::byte>& out) {
  out.clear();
  StateWriter w(out);
  const std::uint32_t version = kCheckpointFormatVersion, reserved = 0;
  w.write_raw(kMagic.data(), kMagic.size());
  w.write_raw(&version, sizeof version);
  w.write_raw(&reserved, sizeof reserved);
  w.write_u64(0);  // the body's length, patched below
  w.write_u64(header.config_fingerprint);
  w.write_u64(header.rank);
  w.write_u64(header.nodes);
  w.write_u64(header.iteration);
  w.write_string(header.strategy);
  w.write_string(header.config_text);
  w.write_u64(states_.size());
  for (const auto& [name, state] : states_) {
    w.write_string(name);
    const std::size_t length_at = w.size();
    w.write_u64(0);  // the section's length, patched below
    state->save_state(w);
    w.patch_u64(length_at, w.size() - length_at - sizeof(std::uint64_t));
  }
  w.patch_u64(kPrefixBytes - sizeof(std::uint64_t), w.size() - kPrefixBytes);
  const std::uint32_t crc = crc32_of(out);
  w.write_raw(&crc, sizeof crc);
}

void CheckpointSet::load(const Checkpoint& checkpoint, const std::string& source) {
  for (const auto& [name, _] : checkpoint.sections) {
    const bool known = std::any_of(states_.begin(), states_.end(),
                                   [&name = name](const auto& s) { return s.first == name; });
    if (!known) {
      throw CheckpointError(source + ": section '" + name +
                            "' is state this job does not have (another pipeline?)");
    }
  }
  for (const auto& [name, state] : states_) {
    const auto it = checkpoint.sections.find(name);
    if (it == checkpoint.sections.end()) {
      throw CheckpointError(source + ": no section '" + name + "' (this job's state)");
    }
    StateReader in(it->second, source + ", section '" + name + "'");
    state->load_state(in);
    in.expect_end();
  }
}

std::vector<std::string> CheckpointSet::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : states_) out.push_back(name);
  return out;
}

// ---- CheckpointStore ----

CheckpointStore::CheckpointStore(std::filesystem::path dir, std::size_t rank, std::size_t keep)
    : node_dir_(std::move(dir) / ("node-" + std::to_string(rank))), keep_(keep) {
  GRADMESH_CHECK_LE(std::size_t{1}, keep_, "CheckpointStore: keep must be >= 1");
}

std::filesystem::path CheckpointStore::path(std::uint64_t iteration) const {
  char name[40];
  std::snprintf(name, sizeof name, "ckpt-%012llu%s", static_cast<unsigned long long>(iteration),
                kSuffix);
  return node_dir_ / name;
}

void CheckpointStore::save(std::uint64_t iteration, std::span<const std::byte> file) {
  std::error_code ec;
  std::filesystem::create_directories(node_dir_, ec);
  if (ec) throw CheckpointError("cannot create folder " + node_dir_.string() + ": " + ec.message());
  write_file_atomically(path(iteration), file);
  const auto present = iterations();
  for (std::size_t i = keep_; i < present.size(); ++i) {
    std::filesystem::remove(path(present[i]), ec);  // best effort: an old file left is harmless
  }
}

std::vector<std::uint64_t> CheckpointStore::iterations() const {
  std::vector<std::uint64_t> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(node_dir_, ec)) return out;
  for (const auto& entry : std::filesystem::directory_iterator(node_dir_, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string_view suffix = kSuffix;
    if (name.size() != 5 + 12 + suffix.size() || !name.starts_with("ckpt-") ||
        !name.ends_with(suffix)) {
      continue;
    }
    const std::string digits = name.substr(5, 12);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    out.push_back(std::stoull(digits));
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

std::vector<std::uint64_t> CheckpointStore::valid_iterations(
    std::vector<std::string>& problems) const {
  std::vector<std::uint64_t> out;
  for (const std::uint64_t iteration : iterations()) {
    try {
      (void)load(iteration);
      out.push_back(iteration);
    } catch (const CheckpointError& e) {
      problems.emplace_back(e.what());
    }
  }
  return out;
}

Checkpoint CheckpointStore::load(std::uint64_t iteration) const {
  const auto file = path(iteration);
  Checkpoint checkpoint = decode_checkpoint(read_whole_file(file), file.string());
  if (checkpoint.header.iteration != iteration) {
    throw CheckpointError(file.string() + ": holds iteration " +
                          std::to_string(checkpoint.header.iteration) + ", its name says " +
                          std::to_string(iteration));
  }
  return checkpoint;
}

}  // namespace gradmesh::app
