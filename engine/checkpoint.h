#pragma once
// The state a stateful task saves and loads (DESIGN.md: engine/ owns "checkpoints of state"): the
// Checkpointable interface and the typed writer and reader of its bytes. The engine knows nothing
// of what a state means (parameters, momentum, a data cursor: each Checkpointable writes and
// reads its own) nor of the file that holds a node's states, who wrote it or where it lives on
// disk: that is the job's (apps/recovery/checkpoint_file.h).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gradmesh::engine {

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

}  // namespace gradmesh::engine
