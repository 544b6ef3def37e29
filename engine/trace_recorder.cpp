#include "engine/trace_recorder.h"

#include <fstream>

#include "engine/error.h"

namespace gradmesh::engine {

TraceRecorder::TraceRecorder() : origin_(std::chrono::steady_clock::now()) {}

void TraceRecorder::on_task_start(const TaskEvent& event) noexcept { record(event); }
void TraceRecorder::on_task_end(const TaskEvent& event) noexcept { record(event); }

void TraceRecorder::record(const TaskEvent& event) noexcept {
  try {
    const double seconds = std::chrono::duration<double>(event.time - origin_).count();
    std::lock_guard lock(mutex_);
    entries_.push_back(
        Entry{event.kind, std::string(event.name), event.arena, event.run, seconds, event.failed});
  } catch (...) {
    // Out of memory while tracing: drop the event rather than disturb the run.
  }
}

std::vector<TraceRecorder::Entry> TraceRecorder::entries() const {
  std::lock_guard lock(mutex_);
  return entries_;
}

std::optional<double> TraceRecorder::time_of(TaskEvent::Kind kind, std::string_view name,
                                             std::uint64_t run) const {
  std::lock_guard lock(mutex_);
  for (const Entry& e : entries_) {
    if (e.kind == kind && e.run == run && e.name == name) return e.seconds;
  }
  return std::nullopt;
}

void TraceRecorder::clear() {
  std::lock_guard lock(mutex_);
  entries_.clear();
}

void TraceRecorder::write_chrome_trace(const std::filesystem::path& path) const {
  std::ofstream out(path);
  if (!out) throw Error("cannot write trace file " + path.string());
  out << "[\n";
  bool first = true;
  for (const Entry& e : entries()) {
    if (!first) out << ",\n";
    first = false;
    out << R"({"name":")" << e.name << R"(","ph":")"
        << (e.kind == TaskEvent::Kind::kStart ? "B" : "E") << R"(","ts":)"
        << static_cast<long long>(e.seconds * 1e6) << R"(,"pid":0,"tid":")" << to_string(e.arena)
        << R"(","args":{"run":)" << e.run << "}}";
  }
  out << "\n]\n";
  if (!out) throw Error("failed writing trace file " + path.string());
}

}  // namespace gradmesh::engine
