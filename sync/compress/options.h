#pragma once
// [sync.compression]: the gradient compressor a job allows the planner to use (issue 28;
// docs/compression.md). The user picks the compressor, the planner picks the layers where it pays
// (by predicted time: topo/planner.h), under the strategies that plan per layer with all-reduce
// (auto, allreduce).

#include <cstdint>
#include <string>
#include <string_view>

#include "sync/option_table.h"

namespace gradmesh::topo {
struct PlannerInput;
}

namespace gradmesh::sync {

/// sync.compression.method's value that compresses nothing (the default).
inline constexpr std::string_view kNoCompression = "none";

/// sync.compression.*.
struct CompressionOptions {
  /// "none", or "powersgd" (Vogels et al., NeurIPS'19: rank-r power iteration with error feedback
  /// and a warm-started Q, on all-reduce).
  std::string method = "none";
  std::int64_t rank = 2;             ///< PowerSGD's rank r (>= 1)
  std::int64_t start_iteration = 0;  ///< iterations sent uncompressed first (>= 0)

  /// Whether a compressor is asked for (method other than kNoCompression).
  [[nodiscard]] bool compresses() const noexcept { return method != kNoCompression; }
};

/// [sync.compression]: method (none, powersgd), rank (integer >= 1, default 2), start_iteration
/// (integer >= 0, default 0).
[[nodiscard]] OptionTable compression_option_table();

/// The [sync.compression] values of `values` (defaults where unset).
[[nodiscard]] CompressionOptions compression_options(const OptionValues& values);

/// Adds the compressed schemes `options` allows to the planner's input (method powersgd: the
/// powersgd scheme, last in tie order: of equal times the uncompressed scheme wins). Nothing for
/// method none or one node.
void add_compressed_schemes(const CompressionOptions& options, topo::PlannerInput& input);

}  // namespace gradmesh::sync
