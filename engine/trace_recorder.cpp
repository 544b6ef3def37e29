#include "engine/trace_recorder.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <tuple>

#include "engine/error.h"

namespace gradmesh::engine {

namespace {

/// One task run: a start paired with its end.
struct Span {
  const TraceRecorder::Entry* start;
  double end_seconds;
  bool failed;
  bool unfinished;
  std::size_t lane = 0;
};

/// `seconds` as microseconds with three decimals (the trace's unit, nanosecond resolution).
std::string micros(double seconds) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.3f", seconds * 1e6);
  return text;
}

/// `text` as a JSON string (quotes and backslashes escaped, control characters dropped).
std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

/// Pairs each start with the next end of the same (name, task, arena, run); a start never ended
/// lasts until `last`. Sorted by start time.
std::vector<Span> pair_spans(const std::vector<TraceRecorder::Entry>& entries, double last) {
  using Key = std::tuple<std::string_view, std::size_t, Arena, std::uint64_t>;
  std::map<Key, std::vector<std::size_t>> open;  // key -> indices into spans, oldest first
  std::vector<Span> spans;
  for (const TraceRecorder::Entry& e : entries) {
    const Key key{e.name, e.task, e.arena, e.run};
    if (e.kind == TaskEvent::Kind::kStart) {
      open[key].push_back(spans.size());
      spans.push_back(Span{&e, last, false, true});
    } else if (auto it = open.find(key); it != open.end() && !it->second.empty()) {
      Span& span = spans[it->second.front()];
      it->second.erase(it->second.begin());
      span.end_seconds = std::max(e.seconds, span.start->seconds);
      span.failed = e.failed;
      span.unfinished = false;
    }
  }
  std::stable_sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.start->seconds < b.start->seconds;
  });
  return spans;
}

/// Lays each arena's spans on lanes in which none overlap: first fit in order of start.
/// Returns the lane count per arena.
std::map<Arena, std::size_t> assign_lanes(std::vector<Span>& spans) {
  std::map<Arena, std::vector<double>> lane_ends;  // arena -> end of each lane's last span
  for (Span& span : spans) {
    std::vector<double>& ends = lane_ends[span.start->arena];
    const auto free = std::find_if(ends.begin(), ends.end(),
                                   [&span](double end) { return end <= span.start->seconds; });
    span.lane = static_cast<std::size_t>(free - ends.begin());
    if (free == ends.end())
      ends.push_back(span.end_seconds);
    else
      *free = span.end_seconds;
  }
  std::map<Arena, std::size_t> lanes;
  for (const auto& [arena, ends] : lane_ends) lanes[arena] = ends.size();
  return lanes;
}

std::size_t thread_id(Arena arena, std::size_t lane) {
  return (arena == Arena::kCompute ? 1 : 1001) + lane;
}

}  // namespace

TraceRecorder::TraceRecorder()
    : origin_(std::chrono::steady_clock::now()), wall_origin_(std::chrono::system_clock::now()) {}

void TraceRecorder::on_task_start(const TaskEvent& event) noexcept { record(event); }
void TraceRecorder::on_task_end(const TaskEvent& event) noexcept { record(event); }

void TraceRecorder::record(const TaskEvent& event) noexcept {
  try {
    const double seconds = std::chrono::duration<double>(event.time - origin_).count();
    std::lock_guard lock(mutex_);
    entries_.push_back(Entry{event.kind, std::string(event.name), event.task, event.arena,
                             event.run, seconds, event.failed});
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

void TraceRecorder::write_chrome_trace(const std::filesystem::path& path, std::size_t pid) const {
  const std::vector<Entry> all = entries();
  double last = 0.0;
  for (const Entry& e : all) last = std::max(last, e.seconds);
  std::vector<Span> spans = pair_spans(all, last);
  const std::map<Arena, std::size_t> lanes = assign_lanes(spans);

  std::ofstream out(path);
  if (!out) throw Error("cannot write trace file " + path.string());
  const std::string p = std::to_string(pid);
  const long long origin_us =
      std::chrono::duration_cast<std::chrono::microseconds>(wall_origin_.time_since_epoch())
          .count();
  out << R"({"displayTimeUnit":"ms","otherData":{"rank":)" << pid << R"(,"origin_unix_us":)"
      << origin_us << "},\n\"traceEvents\":[\n";
  out << R"({"name":"process_name","ph":"M","pid":)" << p << R"(,"args":{"name":"rank )" << p
      << R"("}},)"
      << "\n"
      << R"({"name":"process_sort_index","ph":"M","pid":)" << p << R"(,"args":{"sort_index":)" << p
      << "}}";
  for (const auto& [arena, count] : lanes) {
    for (std::size_t lane = 0; lane < count; ++lane) {
      out << ",\n"
          << R"({"name":"thread_name","ph":"M","pid":)" << p << R"(,"tid":)"
          << thread_id(arena, lane) << R"(,"args":{"name":")" << to_string(arena) << " " << lane
          << R"("}})";
    }
  }
  for (const Span& s : spans) {
    const Entry& e = *s.start;
    out << ",\n"
        << R"({"name":)" << json_string(e.name) << R"(,"cat":")" << to_string(e.arena)
        << R"(","ph":"X","ts":)" << micros(e.seconds) << R"(,"dur":)"
        << micros(s.end_seconds - e.seconds) << R"(,"pid":)" << p << R"(,"tid":)"
        << thread_id(e.arena, s.lane) << R"(,"args":{"run":)" << e.run << R"(,"arena":")"
        << to_string(e.arena) << '"' << (s.failed ? R"(,"failed":true)" : "")
        << (s.unfinished ? R"(,"unfinished":true)" : "") << "}}";
  }
  out << "\n]}\n";
  if (!out) throw Error("failed writing trace file " + path.string());
}

}  // namespace gradmesh::engine
