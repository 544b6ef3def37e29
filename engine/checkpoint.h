#pragma once
// Checkpoints of task state (DESIGN.md: engine/ owns "checkpoints of state"): what a stateful
// task saves, the versioned file that holds one node's state at an iteration boundary, written
// atomically with a checksum, and the store of a node's checkpoints on disk.
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
#include <string_view>
#include <utility>
#include <vector>

namespace gradmesh::engine {

/// The version written in every checkpoint file; a file of another version is refused.
inline constexpr std::uint32_t kCheckpointFormatVersion = 1;

/// Appends a task's state as bytes: typed values, each read back in the same order by
/// StateReader. Not thread-safe. Memory: one growing buffer (kept by clear()), its own or the
/// caller's.
class StateWriter {
 public:
  StateWriter() : data_(&own_) {}
  /// Appends to `buffer` (which must outlive the writer) instead of a buffer of its own.
  explicit StateWriter(std::vector<std::byte>& buffer) : data_(&buffer) {}
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  void write_u64(std::uint64_t value);
  void write_f64(double value);
  /// u64 count, then the floats' bytes.
  void write_floats(std::span<const float> values);
  void write_u64s(std::span<const std::uint64_t> values);
  void write_f64s(std::span<const double> values);
  /// u64 length, then the bytes.
  void write_string(std::string_view text);
  /// Appends `size` raw bytes.
  void write_raw(const void* data, std::size_t size);
  /// Overwrites the u64 at byte `at` (a length written before its value was known).
  void patch_u64(std::size_t at, std::uint64_t value);
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return *data_; }
  [[nodiscard]] std::size_t size() const noexcept { return data_->size(); }
  /// Empties the buffer, keeping its memory (no allocation when the next state is no larger).
  void clear() noexcept { data_->clear(); }

 private:
  std::vector<std::byte> own_;
  std::vector<std::byte>* data_;
};

/// Reads what a StateWriter wrote. Every read checks the bytes left and throws CheckpointError
/// naming `source` (e.g. "ckpt/node-1/ckpt-000000000040.gmckpt, section 'model'") when the state
/// is shorter than expected or a count is not the one the reader expects. Not thread-safe; the
/// bytes must outlive the reader.
class StateReader {
 public:
  StateReader(std::span<const std::byte> bytes, std::string source);

  [[nodiscard]] std::uint64_t read_u64();
  [[nodiscard]] double read_f64();
  /// Reads exactly out.size() floats into `out` (the count written must equal it).
  void read_floats(std::span<float> out);
  [[nodiscard]] std::vector<float> read_float_vector();
  [[nodiscard]] std::vector<std::uint64_t> read_u64s();
  [[nodiscard]] std::vector<double> read_f64s();
  [[nodiscard]] std::string read_string();
  /// The next `size` raw bytes (a view into the reader's bytes).
  [[nodiscard]] std::span<const std::byte> read_bytes(std::size_t size) {
    return take(size, "bytes");
  }
  /// Throws CheckpointError unless every byte was read.
  void expect_end() const;
  [[nodiscard]] const std::string& source() const noexcept { return source_; }

 private:
  [[nodiscard]] std::span<const std::byte> take(std::size_t size, const char* what);
  [[nodiscard]] std::uint64_t read_count(std::size_t element_size, const char* what);
  std::span<const std::byte> bytes_;
  std::size_t at_ = 0;
  std::string source_;
};

/// State that a node saves at an iteration boundary and loads to resume (a stateful task's state,
/// the optimizer's momentum, a data cursor, a sync stage's own). save_state() and load_state() run
/// on the node's thread between iterations (no task of the graph runs). Errors: load_state throws
/// CheckpointError (naming StateReader::source()) when the saved state does not fit this object
/// (another model size, say).
class Checkpointable {
 public:
  virtual ~Checkpointable() = default;
  /// Appends this object's state to `out`.
  virtual void save_state(StateWriter& out) = 0;
  /// Replaces this object's state with what save_state() wrote.
  virtual void load_state(StateReader& in) = 0;

 protected:
  Checkpointable() = default;
  Checkpointable(const Checkpointable&) = default;
  Checkpointable(Checkpointable&&) = default;
  Checkpointable& operator=(const Checkpointable&) = default;
  Checkpointable& operator=(Checkpointable&&) = default;
};

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

}  // namespace gradmesh::engine
