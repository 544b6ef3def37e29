#pragma once

#include <cstddef>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/observer.h"

namespace gradmesh::engine {

/// An Observer that records every event in arrival order, for tests (e.g. "the push of layer L
/// starts before backward of layer 1 ends": the WFBP property, Poseidon ATC'17 sec. 3.1) and for
/// traces. Thread-safe. Memory: one entry (about 64 bytes) per event; clear() between uses.
class TraceRecorder final : public Observer {
 public:
  struct Entry {
    TaskEvent::Kind kind;
    std::string name;  ///< copied, so entries outlive the graph
    Arena arena;
    std::uint64_t run;
    double seconds;  ///< since the recorder was created
    bool failed;
  };

  TraceRecorder();
  void on_task_start(const TaskEvent& event) noexcept override;
  void on_task_end(const TaskEvent& event) noexcept override;

  /// A copy of every entry so far, in the order recorded.
  [[nodiscard]] std::vector<Entry> entries() const;
  /// Time (s) of the first event of `kind` of task `name` in run `run`; nullopt if none.
  [[nodiscard]] std::optional<double> time_of(TaskEvent::Kind kind, std::string_view name,
                                              std::uint64_t run) const;
  void clear();
  /// Writes the entries as a Chrome trace (chrome://tracing, Perfetto JSON). Throws gradmesh::Error
  /// if the file cannot be written.
  void write_chrome_trace(const std::filesystem::path& path) const;

 private:
  void record(const TaskEvent& event) noexcept;
  std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
};

}  // namespace gradmesh::engine
