#pragma once
// A node's progress during an epoch (issue 12 item 3): on a terminal, a live bar redrawn in place
// (iterations, samples/s, MB/s sent, ETA); otherwise (a pipe, a log file, gradmesh-launch's
// relay) a plain line now and then, so logs stay readable.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace gradmesh::app {

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

/// The progress text: "[rank 0] epoch 2/5 [########------------] 412/938  2650 samples/s
/// 31.2 MB/s  ETA 0:21". `bar_width` cells for the bar (0: no bar, for plain lines). The ETA is the
/// epoch's remaining iterations at its rate so far ("--:--" before the first iteration). Pure.
[[nodiscard]] std::string format_progress(const ProgressSnapshot& s, std::size_t bar_width);

/// Draws the progress of the running epoch on `out`. On a terminal (isatty) update() redraws the
/// bar in place ("\r", at most 5 times a second) and finish() clears it before the epoch's own
/// line; otherwise update() writes a plain line at most every `plain_every` seconds and finish()
/// writes nothing. Thread safety: none; call from the pipeline's thread.
class ProgressReporter {
 public:
  ProgressReporter(std::FILE* out, double plain_every_seconds = 30.0);
  /// Whether `out` is a terminal (the bar) or not (plain lines).
  [[nodiscard]] bool terminal() const noexcept { return terminal_; }
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
  bool terminal_;
  double every_;
  Clock::time_point last_{};
  bool drawn_ = false;
};

}  // namespace gradmesh::app
