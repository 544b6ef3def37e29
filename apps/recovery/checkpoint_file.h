#pragma once
// A node's checkpoint file and its store on disk: the versioned file that holds one node's
// states (engine::Checkpointable) at an iteration boundary with who wrote it (rank, nodes,
// strategy, config), written atomically with a checksum, and the folder of a node's checkpoints.
//
// Poseidon arXiv'15 sec. 4.4 ("Fault Tolerance"): the system is checkpointed and "can be restarted
// from the last checkpoint exactly, keeping all model/solver states and database pointers
// unchanged". Here every node writes its own file; the engine knows nothing of what a section
// means (parameters, momentum, a data cursor): each Checkpointable writes and reads its own.
//
// File format (little-endian, as the wire), version kCheckpointFormatVersion:
//   "GMCKPT\r\n" (8 bytes: the magic)  u32 format version  u32 0 (reserved)  u64 body bytes
//   body:  u64 config fingerprint  u64 rank  u64 nodes  u64 iteration  str strategy
//          str config text  u64 section count  { str name  u64 bytes  bytes } * count
//   u32 crc32 (zlib) of every byte before it
// where str is u64 length + bytes. A file that is shorter or longer than its body length says,
// whose crc differs, or whose magic or version is not this one, is refused (CheckpointError).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpoint.h"

namespace gradmesh::app {

using engine::Checkpointable;
using engine::StateReader;
using engine::StateWriter;

/// The version written in every checkpoint file; a file of another version is refused.
inline constexpr std::uint32_t kCheckpointFormatVersion = 1;

/// Who wrote a checkpoint and where the job stood.
struct CheckpointHeader {
  std::uint64_t config_fingerprint = 0;  ///< of the config keys that shape training
  std::uint64_t rank = 0;
  std::uint64_t nodes = 1;
  std::uint64_t iteration = 0;  ///< iterations done (the next one to run), summed over epochs
  std::string strategy;         ///< sync.strategy
  std::string config_text;      ///< the fingerprinted keys as TOML, to name what differs
  friend bool operator==(const CheckpointHeader&, const CheckpointHeader&) = default;
};

/// One decoded checkpoint: header and the named sections' bytes.
struct Checkpoint {
  CheckpointHeader header;
  std::map<std::string, std::vector<std::byte>, std::less<>> sections;
};

/// Decodes and verifies a checkpoint file's bytes. Throws CheckpointError naming `source` and
/// what is wrong: bad magic, another format version, truncated or trailing bytes, crc mismatch,
/// a malformed header or section list.
[[nodiscard]] Checkpoint decode_checkpoint(std::span<const std::byte> bytes,
                                           const std::string& source);

/// Writes `bytes` to `path` atomically: a temporary file beside it ("<path>.tmp"), fsync, rename
/// over `path`, fsync of the directory. A crash at any point leaves either the old file (or none)
/// or the complete new one. Throws CheckpointError naming the path and the system's reason.
void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes);

/// Reads a whole file. Throws CheckpointError naming the path.
[[nodiscard]] std::vector<std::byte> read_whole_file(const std::filesystem::path& path);

/// Named Checkpointables whose states make one node's checkpoint: save() encodes them (in the
/// order added) with a header; load() gives each its section. Holds references: every object
/// must outlive the set. Not thread-safe: use from the node's thread between iterations.
class CheckpointSet {
 public:
  /// Adds `state` as section `name`. Throws ContractError for an empty or repeated name.
  void add(std::string name, Checkpointable& state);
  /// Encodes the file (format above) into `out`, each state saving straight into it: one copy
  /// of the state, and no allocation once `out` has held a checkpoint of this size.
  void save(const CheckpointHeader& header, std::vector<std::byte>& out);
  /// Loads each state from its section of `checkpoint` (read from `source`). Throws
  /// CheckpointError naming the source and section when a section is missing, unknown to this
  /// set, or not read to its end.
  void load(const Checkpoint& checkpoint, const std::string& source);
  [[nodiscard]] std::vector<std::string> names() const;

 private:
  std::vector<std::pair<std::string, Checkpointable*>> states_;
};

/// A node's checkpoints on disk: `dir`/node-<rank>/ckpt-<iteration, 12 digits>.gmckpt, written
/// atomically, the `keep` newest kept. Thread safety: none (one node, one thread).
class CheckpointStore {
 public:
  /// `keep` >= 1: how many checkpoints to keep after each save.
  CheckpointStore(std::filesystem::path dir, std::size_t rank, std::size_t keep = 2);

  /// Writes `file` (an encoded checkpoint) as the checkpoint of `iteration`, then deletes all but
  /// the `keep` newest. Throws CheckpointError naming the path.
  void save(std::uint64_t iteration, std::span<const std::byte> file);

  /// Iterations of the checkpoint files present (not verified), newest first. A missing node
  /// folder gives none.
  [[nodiscard]] std::vector<std::uint64_t> iterations() const;

  /// Reads and verifies every checkpoint file present, newest first; returns the iterations of
  /// those that decode, and appends to `problems` one line per file that does not (its path and
  /// why: torn, corrupt, another version), so the caller can warn.
  [[nodiscard]] std::vector<std::uint64_t> valid_iterations(
      std::vector<std::string>& problems) const;

  /// Reads and verifies the checkpoint of `iteration`. Throws CheckpointError naming the path.
  [[nodiscard]] Checkpoint load(std::uint64_t iteration) const;

  [[nodiscard]] std::filesystem::path path(std::uint64_t iteration) const;
  [[nodiscard]] const std::filesystem::path& node_dir() const noexcept { return node_dir_; }

 private:
  std::filesystem::path node_dir_;
  std::size_t keep_;
};

}  // namespace gradmesh::app
