#pragma once
// Options of strategy `ako` (Ako SoCC'16 sec. 3).

#include <cstddef>
#include <optional>

#include "sync/option_table.h"

namespace gradmesh::sync {

/// The model an `ako` job ends with (sync.ako.final).
enum class AkoFinal : unsigned char {
  /// The mean of the n replicas (a ring all-reduce of the parameters, divided by n): every node
  /// ends with the same bits. The gradients a replica had not received yet count through the
  /// replicas that had them.
  kAverage,
  /// Every node folds in, at once, every peer's gradients it has not applied yet (up to p - 1
  /// rounds of each): all replicas then hold every gradient (Ako's exchange, completed).
  kFold,
};

struct SyncOptions;

/// sync.ako.* (and net.max_send_rate, which eq. 3 reads as B when set).
struct AkoOptions {
  std::optional<std::size_t> partitions;      ///< p; nullopt = auto (Ako eq. 3)
  std::size_t staleness = 0;                  ///< tau, in iterations (Ako sec. 3.3)
  std::optional<double> bandwidth;            ///< B for eq. 3, bytes/s (sync.ako.bandwidth)
  std::optional<double> max_send_rate;        ///< net.max_send_rate, bytes/s: B when set
  AkoFinal final_model = AkoFinal::kAverage;  ///< sync.ako.final
};

/// [sync.ako]: bandwidth ("auto" or a rate), final (average, fold), partitions ("auto" or an
/// integer >= 1), staleness (an integer >= 0, iterations).
[[nodiscard]] OptionTable ako_option_table();

/// The ako options of `options`: its [sync.ako] values (defaults where unset) and its
/// net.max_send_rate.
[[nodiscard]] AkoOptions ako_options(const SyncOptions& options);

}  // namespace gradmesh::sync
