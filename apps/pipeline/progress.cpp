#include "apps/pipeline/progress.h"

#include <algorithm>
#include <cmath>

#include <unistd.h>

namespace gradmesh::app {

namespace {

std::string clock_text(double seconds) {
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

}  // namespace

std::string format_progress(const ProgressSnapshot& s, std::size_t bar_width) {
  std::string out = "[rank " + std::to_string(s.rank) + "] epoch " + std::to_string(s.epoch) + "/" +
                    std::to_string(s.epochs) + " ";
  const double fraction =
      s.iterations > 0 ? static_cast<double>(s.iteration) / static_cast<double>(s.iterations) : 0;
  if (bar_width > 0) {
    const auto filled = std::min<std::size_t>(
        bar_width, static_cast<std::size_t>(fraction * static_cast<double>(bar_width)));
    out += "[" + std::string(filled, '#') + std::string(bar_width - filled, '-') + "] ";
  }
  const double eta = s.iteration > 0 ? s.elapsed_seconds / static_cast<double>(s.iteration) *
                                           static_cast<double>(s.iterations - s.iteration)
                                     : -1.0;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%llu/%llu  %.0f samples/s  %.1f MB/s  ETA %s",
                static_cast<unsigned long long>(s.iteration),
                static_cast<unsigned long long>(s.iterations), s.samples_per_second,
                s.megabytes_per_second, clock_text(eta).c_str());
  return out + buf;
}

ProgressReporter::ProgressReporter(std::FILE* out, double plain_every_seconds)
    : out_(out),
      terminal_(::isatty(::fileno(out)) == 1),
      every_(plain_every_seconds),
      last_(Clock::now()) {}

bool ProgressReporter::due(bool last) const noexcept {
  const double since = std::chrono::duration<double>(Clock::now() - last_).count();
  // A terminal's bar shows the epoch's end too; plain lines leave it to the epoch's own line.
  return terminal_ ? (since >= 0.2 || last) : (since >= every_ && !last);
}

void ProgressReporter::update(const ProgressSnapshot& s) {
  if (terminal_) {
    std::fprintf(out_, "\r%s\033[K", format_progress(s, 24).c_str());
    drawn_ = true;
  } else {
    std::fprintf(out_, "%s\n", format_progress(s, 0).c_str());
  }
  std::fflush(out_);
  last_ = Clock::now();
}

void ProgressReporter::finish() {
  if (terminal_ && drawn_) {
    std::fprintf(out_, "\r\033[K");
    std::fflush(out_);
  }
  drawn_ = false;
  last_ = Clock::now();
}

}  // namespace gradmesh::app
