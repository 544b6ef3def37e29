#pragma once
// gradmesh-launch's one console for N nodes (issue 30 item 1): the nodes' output lines merged so
// that an event every node reports prints once, and one progress bar for the job.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "apps/pipeline/progress.h"

namespace gradmesh::app {

/// Merges the stdout lines of a job's N nodes into one console. Pure (the caller passes the
/// time); not thread-safe.
///
/// A log line ("[HH:MM:SS.mmm] [rank r] [level] text", as gradmesh-node logs, or "[rank r] text")
/// is held until every node has printed the same text at the same level, then printed once
/// without a rank ("[12:00:01.500] [info] connected to every peer"). One that not every node
/// prints (a node's own port, a failure) is printed with the ranks that printed it ("[ranks 0,2]",
/// "[rank 1]") once each rank missing from it has moved past it (printed a line that another
/// rank printed after this one) or it was held `hold_seconds`. Warnings and errors always name
/// their ranks ("[ranks 0-3] [warning] ..."). Lines print in the order their first copy arrived.
///
/// Records: "@gradmesh progress {json}" updates the job's progress (progress_text()); "@gradmesh
/// epoch {json}" is held until every node reported that epoch, then printed as one line: the
/// job's samples/s and MB sent (sums), the loss (mean, with the ranks' range when they differ)
/// and the test accuracy (likewise). "@gradmesh done {json}" (a node's end) likewise, once every
/// node sent it: iterations, seconds (the longest), the job's samples/s, test accuracy and bytes
/// sent per iteration per node (mean). A malformed record is printed as an ordinary line.
class ConsoleMerger {
 public:
  /// @param nodes N >= 1; @param hold_seconds how long a line may wait for the other nodes.
  explicit ConsoleMerger(std::size_t nodes, double hold_seconds = 2.0);

  /// One complete line of rank `rank`'s stdout (without its '\n') at time `now` (seconds, any
  /// origin, non-decreasing). Returns the lines to print now, each ending in '\n'.
  [[nodiscard]] std::vector<std::string> add(std::size_t rank, std::string_view line, double now);
  /// The lines held longer than the hold at `now` (every held line when `all`: the job ended).
  [[nodiscard]] std::vector<std::string> flush(double now, bool all);

  /// The job's progress from the nodes' latest records: "epoch 2/5 [####----] 412/938  10600
  /// samples/s  124.8 MB/s  ETA 0:21" with the slowest node's epoch and iteration, the nodes'
  /// summed samples/s and MB/s, and the latest ETA; nullopt before the first record or after
  /// every node's last epoch ended. `bar_width` cells (0: no bar).
  [[nodiscard]] std::optional<std::string> progress_text(std::size_t bar_width) const;

 private:
  struct Group {
    std::uint64_t seq = 0;
    double first_seen = 0;
    std::string time;   ///< the first copy's "HH:MM:SS.mmm" (empty: not a log line)
    std::string level;  ///< "info", "warning", ... (empty: not a log line)
    std::string text;
    std::vector<bool> ranks;
    std::vector<std::int64_t> index;  ///< per rank: its line number of this line, -1: not printed
    std::size_t count = 0;
  };
  /// Prints every held line, with the ranks it has (before a record: each node printed its
  /// lines before its record).
  void flush_pending(std::vector<std::string>& out);
  /// Whether every rank missing from `g` has moved past it.
  [[nodiscard]] bool moved_past(const Group& g) const;
  struct Progress {
    std::size_t epoch = 0, epochs = 0;
    std::uint64_t iteration = 0, iterations = 0;
    double samples_per_second = 0, megabytes_per_second = 0, eta_seconds = -1;
    bool ended = false;  ///< its epoch record for the last epoch came
  };
  struct Epoch {
    std::size_t epochs = 0;
    std::uint64_t done = 0;
    double loss = 0, samples_per_second = 0, bytes_sent = 0;
    std::optional<double> accuracy, compression_error;
    /// A user's evaluation's metrics, by name.
    std::vector<std::pair<std::string, double>> metrics;
  };

  bool record(std::size_t rank, std::string_view body, double now, std::vector<std::string>& out);
  void emit_ready(double now, bool all, std::vector<std::string>& out);
  [[nodiscard]] std::string render(const Group& g) const;
  [[nodiscard]] std::string render_epoch(std::size_t epoch,
                                         const std::vector<std::optional<Epoch>>& ranks) const;

  std::size_t nodes_;
  double hold_;
  std::uint64_t next_seq_ = 1;
  std::vector<std::int64_t> lines_;  ///< per rank: lines printed so far
  std::vector<Group> pending_;       ///< in seq order
  std::vector<Group> recent_;        ///< the last printed ones (for moved_past), oldest first
  std::vector<std::optional<Progress>> progress_;
  std::map<std::size_t, std::vector<std::optional<Epoch>>> epochs_;  ///< by 1-based epoch
  std::map<std::size_t, double> epoch_first_seen_;
  struct Done {
    std::uint64_t iterations = 0;
    double seconds = 0, samples_per_second = 0, accuracy = 0, bytes_per_iteration = 0;
  };
  std::vector<std::optional<Done>> done_;
  double done_first_seen_ = -1;  ///< < 0: no done record yet
  [[nodiscard]] std::string render_done() const;
};

/// "rank 1", "ranks 0,2", "ranks 0-3" for the ranks set in `ranks`.
[[nodiscard]] std::string rank_list(const std::vector<bool>& ranks);

}  // namespace gradmesh::app
