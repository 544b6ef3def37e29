#include "apps/launch/console.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <regex>

#include <nlohmann/json.hpp>

namespace gradmesh::app {

namespace {

/// "0.6807" or, when the ranks differ, "0.6807 (0.6747-0.6866)": the mean and the range.
std::string mean_and_range(const std::vector<double>& values, const char* format, double scale) {
  double sum = 0, lo = values.front(), hi = values.front();
  for (const double v : values) {
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, format, scale * sum / static_cast<double>(values.size()));
  std::string out = buf;
  char a[48], b[48];
  std::snprintf(a, sizeof a, format, scale * lo);
  std::snprintf(b, sizeof b, format, scale * hi);
  if (std::string(a) != b) out += std::string(" (ranks ") + a + "-" + b + ")";
  return out;
}

/// How many printed lines moved_past() looks back on.
constexpr std::size_t kRecent = 64;

bool is_alert(const std::string& level) {
  return level == "warning" || level == "error" || level == "critical";
}

}  // namespace

std::string rank_list(const std::vector<bool>& ranks) {
  std::vector<std::size_t> set;
  for (std::size_t r = 0; r < ranks.size(); ++r)
    if (ranks[r]) set.push_back(r);
  if (set.size() == 1) return "rank " + std::to_string(set.front());
  std::string out = "ranks ";
  for (std::size_t i = 0; i < set.size();) {
    std::size_t j = i;
    while (j + 1 < set.size() && set[j + 1] == set[j] + 1) ++j;
    if (i > 0) out += ",";
    out += std::to_string(set[i]);
    if (j >= i + 2) {
      out += "-" + std::to_string(set[j]);
    } else if (j == i + 1) {
      out += "," + std::to_string(set[j]);
    }
    i = j + 1;
  }
  return out;
}

ConsoleMerger::ConsoleMerger(std::size_t nodes, double hold_seconds)
    : nodes_(std::max<std::size_t>(1, nodes)),
      hold_(hold_seconds),
      lines_(nodes_, 0),
      progress_(nodes_),
      done_(nodes_) {}

std::vector<std::string> ConsoleMerger::add(std::size_t rank, std::string_view line, double now) {
  std::vector<std::string> out;
  if (rank >= nodes_) return out;
  if (line.starts_with(kRecordPrefix) &&
      record(rank, line.substr(kRecordPrefix.size()), now, out)) {
    emit_ready(now, false, out);
    return out;
  }
  // "[12:00:01.500] [rank 0] [info] text" or "[rank 0] text" (the rank is the pipe's, not read).
  static const std::regex log_line(R"(^\[([0-9:.]+)\] \[rank \d+\] \[([a-z]+)\] (.*)$)");
  static const std::regex rank_line(R"(^\[rank \d+\] (.*)$)");
  const std::string text(line);
  Group g;
  std::smatch m;
  if (std::regex_match(text, m, log_line)) {
    g.time = m[1];
    g.level = m[2];
    g.text = m[3];
  } else if (std::regex_match(text, m, rank_line)) {
    g.text = m[1];
  } else {
    g.text = text;
  }
  auto it = std::find_if(pending_.begin(), pending_.end(), [&](const Group& p) {
    return !p.ranks[rank] && p.level == g.level && p.text == g.text;
  });
  if (it == pending_.end()) {
    g.seq = next_seq_++;
    g.first_seen = now;
    g.ranks.assign(nodes_, false);
    g.index.assign(nodes_, -1);
    pending_.push_back(std::move(g));
    it = pending_.end() - 1;
  }
  it->ranks[rank] = true;
  it->index[rank] = lines_[rank]++;
  ++it->count;
  emit_ready(now, false, out);
  return out;
}

std::vector<std::string> ConsoleMerger::flush(double now, bool all) {
  std::vector<std::string> out;
  emit_ready(now, all, out);
  return out;
}

void ConsoleMerger::emit_ready(double now, bool all, std::vector<std::string>& out) {
  // Log lines, oldest first, while the oldest is complete, final or held long enough.
  while (!pending_.empty()) {
    const Group& g = pending_.front();
    const bool ready = all || g.count == nodes_ || now - g.first_seen >= hold_ || moved_past(g);
    if (!ready) break;
    out.push_back(render(g));
    recent_.push_back(std::move(pending_.front()));
    if (recent_.size() > kRecent) recent_.erase(recent_.begin());
    pending_.erase(pending_.begin());
  }
  // Epochs every node reported (or, at the end or after a long hold, those some did).
  for (auto it = epochs_.begin(); it != epochs_.end();) {
    const std::size_t count = static_cast<std::size_t>(std::count_if(
        it->second.begin(), it->second.end(), [](const auto& e) { return e.has_value(); }));
    const bool ready = count == nodes_ || all || now - epoch_first_seen_[it->first] >= 30.0 * hold_;
    if (!ready) break;
    flush_pending(out);  // each node printed those lines before its record
    out.push_back(render_epoch(it->first, it->second));
    epoch_first_seen_.erase(it->first);
    it = epochs_.erase(it);
  }
  if (done_first_seen_ >= 0 && epochs_.empty()) {
    const auto count = static_cast<std::size_t>(
        std::count_if(done_.begin(), done_.end(), [](const auto& d) { return d.has_value(); }));
    if (count == nodes_ || all || now - done_first_seen_ >= 30.0 * hold_) {
      flush_pending(out);
      out.push_back(render_done());
      done_.assign(nodes_, std::nullopt);
      done_first_seen_ = -1;
    }
  }
}

void ConsoleMerger::flush_pending(std::vector<std::string>& out) {
  for (Group& g : pending_) {
    out.push_back(render(g));
    recent_.push_back(std::move(g));
    if (recent_.size() > kRecent) recent_.erase(recent_.begin());
  }
  pending_.clear();
}

bool ConsoleMerger::moved_past(const Group& g) const {
  const auto after = [&g](const Group& other, std::size_t r) {
    if (other.index[r] < 0) return false;
    for (std::size_t q = 0; q < g.index.size(); ++q) {
      if (g.index[q] >= 0 && other.index[q] > g.index[q]) return true;
    }
    return false;
  };
  for (std::size_t r = 0; r < nodes_; ++r) {
    if (g.ranks[r]) continue;
    const bool past =
        std::any_of(pending_.begin(), pending_.end(),
                    [&](const Group& o) { return after(o, r); }) ||
        std::any_of(recent_.begin(), recent_.end(), [&](const Group& o) { return after(o, r); });
    if (!past) return false;
  }
  return true;
}

bool ConsoleMerger::record(std::size_t rank, std::string_view body, double now,
                           std::vector<std::string>& out) {
  (void)out;
  const std::size_t space = body.find(' ');
  if (space == std::string_view::npos) return false;
  const std::string_view kind = body.substr(0, space);
  const nlohmann::json j = nlohmann::json::parse(body.substr(space + 1), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  try {
    if (kind == "progress") {
      Progress p;
      p.epoch = j.at("epoch").get<std::size_t>();
      p.epochs = j.at("epochs").get<std::size_t>();
      p.iteration = j.at("iteration").get<std::uint64_t>();
      p.iterations = j.at("iterations").get<std::uint64_t>();
      p.samples_per_second = j.at("samples_per_second").get<double>();
      p.megabytes_per_second = j.at("megabytes_per_second").get<double>();
      const double elapsed = j.at("elapsed_seconds").get<double>();
      p.eta_seconds = p.iteration > 0 ? elapsed / static_cast<double>(p.iteration) *
                                            static_cast<double>(p.iterations - p.iteration)
                                      : -1.0;
      progress_[rank] = p;
      return true;
    }
    if (kind == "done") {
      Done d;
      d.iterations = j.at("iterations").get<std::uint64_t>();
      d.seconds = j.at("seconds").get<double>();
      d.samples_per_second = j.at("samples_per_second").get<double>();
      d.accuracy = j.at("accuracy").get<double>();
      d.bytes_per_iteration = j.at("bytes_per_iteration").get<double>();
      done_[rank] = d;
      if (done_first_seen_ < 0) done_first_seen_ = now;
      if (progress_[rank]) progress_[rank]->ended = true;
      return true;
    }
    if (kind == "epoch") {
      Epoch e;
      const auto epoch = j.at("epoch").get<std::size_t>();
      e.epochs = j.at("epochs").get<std::size_t>();
      e.done = j.at("done").get<std::uint64_t>();
      e.loss = j.at("loss").get<double>();
      e.samples_per_second = j.at("samples_per_second").get<double>();
      e.bytes_sent = j.at("bytes_sent").get<double>();
      if (j.contains("accuracy") && !j["accuracy"].is_null())
        e.accuracy = j["accuracy"].get<double>();
      if (j.contains("compression_error") && !j["compression_error"].is_null())
        e.compression_error = j["compression_error"].get<double>();
      if (j.contains("metrics") && j["metrics"].is_object()) {
        for (const auto& [name, value] : j["metrics"].items()) {
          e.metrics.emplace_back(name, value.is_null() ? std::numeric_limits<double>::quiet_NaN()
                                                       : value.get<double>());
        }
      }
      auto& slot = epochs_[epoch];
      if (slot.empty()) {
        slot.resize(nodes_);
        epoch_first_seen_[epoch] = now;
      }
      slot[rank] = e;
      if (progress_[rank] && epoch >= e.epochs) progress_[rank]->ended = true;
      return true;
    }
  } catch (const nlohmann::json::exception&) {
    return false;  // printed as it came
  }
  return false;
}

std::string ConsoleMerger::render(const Group& g) const {
  const bool everyone = g.count == nodes_;
  const std::string who = everyone && !is_alert(g.level) ? "" : "[" + rank_list(g.ranks) + "] ";
  if (g.level.empty()) return who + g.text + "\n";
  return "[" + g.time + "] " + who + "[" + g.level + "] " + g.text + "\n";
}

std::string ConsoleMerger::render_epoch(std::size_t epoch,
                                        const std::vector<std::optional<Epoch>>& ranks) const {
  std::vector<double> loss, accuracy, compression;
  std::vector<bool> reported(nodes_, false);
  double samples = 0, bytes = 0;
  std::uint64_t done = 0;
  std::size_t epochs = 0;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r]) continue;
    const Epoch& e = *ranks[r];
    reported[r] = true;
    loss.push_back(e.loss);
    if (e.accuracy) accuracy.push_back(*e.accuracy);
    if (e.compression_error) compression.push_back(*e.compression_error);
    samples += e.samples_per_second;
    bytes += e.bytes_sent;
    done = std::max(done, e.done);
    epochs = std::max(epochs, e.epochs);
  }
  const std::size_t count = loss.size();
  std::string out = count == nodes_ ? "" : "[" + rank_list(reported) + "] ";
  out += "epoch " + std::to_string(epoch) + "/" + std::to_string(epochs) + "  iter " +
         std::to_string(done) + "  loss " + mean_and_range(loss, "%.4f", 1.0);
  if (!accuracy.empty()) out += "  test accuracy " + mean_and_range(accuracy, "%.2f%%", 100.0);
  char buf[96];
  std::snprintf(buf, sizeof buf, "  %.0f samples/s  %.1f MB sent", samples, bytes / 1e6);
  out += buf;
  if (!compression.empty())
    out += "  compression error " + mean_and_range(compression, "%.3f", 1.0);
  // A user's metrics, by the first reporting rank's names (in name order: the record's JSON
  // object keeps no order).
  const auto first = std::find_if(ranks.begin(), ranks.end(), [](const auto& e) { return e; });
  if (first != ranks.end()) {
    for (const auto& [name, value] : (*first)->metrics) {
      std::vector<double> values;
      for (const auto& e : ranks) {
        if (!e) continue;
        for (const auto& [n, v] : e->metrics)
          if (n == name) values.push_back(v);
      }
      out += "  " + name + " " + mean_and_range(values, "%.4g", 1.0);
    }
  }
  return out + "\n";
}

std::string ConsoleMerger::render_done() const {
  std::vector<bool> reported(nodes_, false);
  std::vector<double> accuracy, bytes;
  double seconds = 0, samples = 0;
  std::uint64_t iterations = 0;
  for (std::size_t r = 0; r < nodes_; ++r) {
    if (!done_[r]) continue;
    reported[r] = true;
    iterations = std::max(iterations, done_[r]->iterations);
    seconds = std::max(seconds, done_[r]->seconds);
    samples += done_[r]->samples_per_second;
    accuracy.push_back(done_[r]->accuracy);
    bytes.push_back(done_[r]->bytes_per_iteration);
  }
  std::string out = accuracy.size() == nodes_ ? "" : "[" + rank_list(reported) + "] ";
  char buf[160];
  std::snprintf(buf, sizeof buf, "done: %llu iterations in %.1f s, %.0f samples/s, test accuracy ",
                static_cast<unsigned long long>(iterations), seconds, samples);
  double mean_bytes = 0;
  for (const double b : bytes) mean_bytes += b / static_cast<double>(bytes.size());
  out += buf + mean_and_range(accuracy, "%.2f%%", 100.0) + ", ";
  std::snprintf(buf, sizeof buf, "%.0f", mean_bytes);
  out += std::string(buf) + " bytes sent per iteration per node (mean)";
  return out + "\n";
}

std::optional<std::string> ConsoleMerger::progress_text(std::size_t bar_width) const {
  const Progress* slowest = nullptr;
  double samples = 0, megabytes = 0, eta = -1;
  bool any = false, all_ended = true;
  for (const auto& p : progress_) {
    if (!p) {
      all_ended = false;
      continue;
    }
    any = true;
    all_ended = all_ended && p->ended;
    samples += p->samples_per_second;
    megabytes += p->megabytes_per_second;
    eta = std::max(eta, p->eta_seconds);
    if (slowest == nullptr ||
        std::tie(p->epoch, p->iteration) < std::tie(slowest->epoch, slowest->iteration)) {
      slowest = &*p;
    }
  }
  if (!any || all_ended) return std::nullopt;
  std::string out =
      "epoch " + std::to_string(slowest->epoch) + "/" + std::to_string(slowest->epochs) + " ";
  if (bar_width > 0) {
    const double fraction = slowest->iterations > 0 ? static_cast<double>(slowest->iteration) /
                                                          static_cast<double>(slowest->iterations)
                                                    : 0.0;
    const auto filled = std::min<std::size_t>(
        bar_width, static_cast<std::size_t>(fraction * static_cast<double>(bar_width)));
    out += "[" + std::string(filled, '#') + std::string(bar_width - filled, '-') + "] ";
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%llu/%llu  %.0f samples/s  %.1f MB/s  ETA %s  (%zu nodes)",
                static_cast<unsigned long long>(slowest->iteration),
                static_cast<unsigned long long>(slowest->iterations), samples, megabytes,
                clock_text(eta).c_str(), nodes_);
  return out + buf;
}

}  // namespace gradmesh::app
