#include "apps/pipeline/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "engine/error.h"

namespace gradmesh::app {

namespace {}  // namespace

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

namespace {

/// One of several ranks of a launcher that may relay each rank's terminal into one.
bool one_of_several_ranks(const topo::EnvLookup& env) {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "WORLD_SIZE"}) {
    const auto value = env(name);
    if (value && *value != "1" && *value != "0") return true;
  }
  return false;
}

bool dumb_terminal(const topo::EnvLookup& env) {
  const auto term = env("TERM");
  return term && *term == "dumb";
}

}  // namespace

ProgressStyle progress_style(std::string_view requested, bool terminal,
                             const topo::EnvLookup& env) {
  if (requested != "auto" && requested != "bar" && requested != "line" && requested != "none") {
    throw ConfigError("--progress: expected auto, bar, line or none, got '" +
                      std::string(requested) + "'");
  }
  if (const auto console = env(kConsoleVariable); console && *console == "records") {
    return ProgressStyle::kRecords;
  }
  if (requested == "bar") return ProgressStyle::kBar;
  if (requested == "line") return ProgressStyle::kLines;
  if (requested == "none") return ProgressStyle::kNone;
  return terminal && !dumb_terminal(env) && !one_of_several_ranks(env) ? ProgressStyle::kBar
                                                                       : ProgressStyle::kLines;
}

bool colour_allowed(bool terminal, const topo::EnvLookup& env) {
  const auto no_color = env("NO_COLOR");
  return terminal && !no_color && !dumb_terminal(env) && !one_of_several_ranks(env);
}

void apply_colour_policy(bool allowed) {
  const auto mode = allowed ? spdlog::color_mode::automatic : spdlog::color_mode::never;
  for (const auto& sink : spdlog::default_logger()->sinks()) {
    if (auto* out = dynamic_cast<spdlog::sinks::stdout_color_sink_mt*>(sink.get())) {
      out->set_color_mode(mode);
    } else if (auto* err = dynamic_cast<spdlog::sinks::stderr_color_sink_mt*>(sink.get())) {
      err->set_color_mode(mode);
    }
  }
}

ProgressReporter::ProgressReporter(std::FILE* out, ProgressStyle style, double plain_every_seconds)
    : out_(out), style_(style), every_(plain_every_seconds), last_(Clock::now()) {}

bool ProgressReporter::due(bool last) const noexcept {
  const double since = std::chrono::duration<double>(Clock::now() - last_).count();
  switch (style_) {
    case ProgressStyle::kBar:  // the bar shows the epoch's end too
      return since >= 0.2 || last;
    case ProgressStyle::kRecords:
      return since >= 0.5 || last;
    case ProgressStyle::kLines:  // plain lines leave the end to the epoch's own line
      return since >= every_ && !last;
    case ProgressStyle::kNone:
      break;
  }
  return false;
}

void ProgressReporter::update(const ProgressSnapshot& s) {
  switch (style_) {
    case ProgressStyle::kBar:
      std::fprintf(out_, "\r%s\033[K", format_progress(s, 24).c_str());
      drawn_ = true;
      break;
    case ProgressStyle::kLines:
      std::fprintf(out_, "%s\n", format_progress(s, 0).c_str());
      break;
    case ProgressStyle::kRecords:
      std::fprintf(out_,
                   "%sprogress {\"rank\":%zu,\"epoch\":%zu,\"epochs\":%zu,\"iteration\":%llu,"
                   "\"iterations\":%llu,\"samples_per_second\":%.3f,\"megabytes_per_second\":%.4f,"
                   "\"elapsed_seconds\":%.3f}\n",
                   std::string(kRecordPrefix).c_str(), s.rank, s.epoch, s.epochs,
                   static_cast<unsigned long long>(s.iteration),
                   static_cast<unsigned long long>(s.iterations), s.samples_per_second,
                   s.megabytes_per_second, s.elapsed_seconds);
      break;
    case ProgressStyle::kNone:
      return;
  }
  std::fflush(out_);
  last_ = Clock::now();
}

void ProgressReporter::finish() {
  if (style_ == ProgressStyle::kBar && drawn_) {
    std::fprintf(out_, "\r\033[K");
    std::fflush(out_);
  }
  drawn_ = false;
  last_ = Clock::now();
}

}  // namespace gradmesh::app
