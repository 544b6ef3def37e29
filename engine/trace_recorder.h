#pragma once

#include <chrono>
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
    std::size_t task;  ///< TaskEvent::task: with name and run, pairs a start with its end
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
  /// Writes the entries as a Chrome trace in its JSON object form (Perfetto, chrome://tracing):
  /// {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {"rank", "origin_unix_us"}}.
  /// Each task run is one complete event ("ph": "X"; "ts", "dur" in microseconds since the
  /// recorder was created; "cat" and args.arena its arena, args.run its run; args.failed when it
  /// failed, args.unfinished when it never ended and "dur" reaches the last event). Tasks of one
  /// arena overlap (a deferred network task waits for its peer while others run), and viewers
  /// need the slices of one thread to nest: each arena's runs are laid on the fewest lanes in
  /// which none overlap (interval partitioning, first fit by start), lane i of an arena being
  /// thread "compute i" / "network i" (tid 1 + i, 1001 + i). `pid` is the node's rank, so that
  /// the traces of a job merge without collisions (scripts/merge-traces, which aligns them by
  /// origin_unix_us: the wall clock when the recorder was created). Throws gradmesh::Error if the
  /// file cannot be written.
  void write_chrome_trace(const std::filesystem::path& path, std::size_t pid = 0) const;

 private:
  void record(const TaskEvent& event) noexcept;
  std::chrono::steady_clock::time_point origin_;
  std::chrono::system_clock::time_point wall_origin_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
};

}  // namespace gradmesh::engine
