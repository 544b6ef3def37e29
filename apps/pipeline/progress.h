#pragma once
// A node's progress during an epoch (issue 12 item 3): on a terminal, a live bar redrawn in place
// (iterations, samples/s, MB/s sent, ETA); otherwise (a pipe, a log file, gradmesh-launch's
// relay) a plain line now and then, so logs stay readable.

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "topo/peer_list.h"

namespace gradmesh::app {

/// The prefix of a record line a node writes for gradmesh-launch's console instead of its progress
/// bar and epoch line (ProgressStyle::kRecords): "@gradmesh progress {json}", "@gradmesh epoch
/// {json}" (apps/launch/console.h reads them).
inline constexpr std::string_view kRecordPrefix = "@gradmesh ";
/// The environment variable gradmesh-launch sets to "records" for its nodes.
inline constexpr const char* kConsoleVariable = "GRADMESH_CONSOLE";

/// How a node shows its progress (--progress; NodeOptions::progress).
enum class ProgressStyle {
  kBar,      ///< a bar redrawn in place ("\r")
  kLines,    ///< a plain line now and then
  kNone,     ///< nothing between epoch lines
  kRecords,  ///< "@gradmesh progress {json}" lines for gradmesh-launch's console
};

/// The style for `requested` ("auto", "bar", "line" or "none"; --progress). GRADMESH_CONSOLE =
/// "records" (gradmesh-launch sets it) gives kRecords whatever was requested. "auto": kBar when
/// `terminal` (stdout is one), TERM is not "dumb" and the process is not one of several ranks of
/// a launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS or WORLD_SIZE above 1: mpirun gives
/// each rank a pseudo-terminal and tangles their "\r" bars into one line); else kLines.
/// @throws gradmesh::ConfigError naming --progress for another value.
[[nodiscard]] ProgressStyle progress_style(std::string_view requested, bool terminal,
                                           const topo::EnvLookup& env);

/// Whether log lines may be coloured: `terminal`, NO_COLOR unset or empty (no-color.org), TERM
/// not "dumb", and not one of several ranks of a launcher (as for progress_style()).
[[nodiscard]] bool colour_allowed(bool terminal, const topo::EnvLookup& env);

/// Turns the colours of spdlog's default logger (its coloured console sinks) on (automatic: when
/// the sink's stream is a colour terminal) or off. Called with colour_allowed() by run_main and
/// the Pipeline.
void apply_colour_policy(bool allowed);

/// Where one epoch stands.
struct ProgressSnapshot {
  std::size_t rank = 0;
  std::size_t epoch = 0;  ///< 1-based
  std::size_t epochs = 1;
  std::uint64_t iteration = 0;      ///< iterations done in this epoch
  std::uint64_t iterations = 0;     ///< iterations in this epoch (>= iteration)
  double samples_per_second = 0;    ///< this node, this epoch so far
  double megabytes_per_second = 0;  ///< sent by this node, this epoch so far (1e6 bytes)
  double elapsed_seconds = 0;       ///< since the epoch began
};

/// `seconds` as "1:05" or "1:02:03"; "--:--" when unknown (negative or not finite). Pure.
inline std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto total = static_cast<long long>(std::llround(seconds));
  char buf[32];
  if (total >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", total / 3600, total / 60 % 60, total % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", total / 60, total % 60);
  }
  return buf;
}

/// The progress text: "[rank 0] epoch 2/5 [########------------] 412/938  2650 samples/s
/// 31.2 MB/s  ETA 0:21". `bar_width` cells for the bar (0: no bar, for plain lines). The ETA is the
/// epoch's remaining iterations at its rate so far ("--:--" before the first iteration). Pure.
[[nodiscard]] std::string format_progress(const ProgressSnapshot& s, std::size_t bar_width);

/// Draws the progress of the running epoch on `out` in `style`: kBar: update() redraws the bar
/// in place ("\r", at most 5 times a second) and finish() clears it before the epoch's own line;
/// kLines: update() writes a plain line at most every `plain_every` seconds; kRecords: a record
/// line ("@gradmesh progress {json}": rank, epoch, epochs, iteration, iterations,
/// samples_per_second, megabytes_per_second, elapsed_seconds) at most twice a second and at the
/// epoch's last iteration; kNone: nothing. Thread safety: none; call from the pipeline's thread.
class ProgressReporter {
 public:
  ProgressReporter(std::FILE* out, ProgressStyle style, double plain_every_seconds = 30.0);
  [[nodiscard]] ProgressStyle style() const noexcept { return style_; }
  /// Whether update() would draw now (cheap: one clock read); `last`: the epoch's last iteration.
  /// Lets the caller gather a snapshot only when it is drawn.
  [[nodiscard]] bool due(bool last) const noexcept;
  /// Draws `s` (call when due()).
  void update(const ProgressSnapshot& s);
  /// Called at the end of the epoch, before its summary line.
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  std::FILE* out_;
  ProgressStyle style_;
  double every_;
  Clock::time_point last_{};
  bool drawn_ = false;
};

}  // namespace gradmesh::app
