#pragma once
// [sync.compression]: the gradient compressor a job allows the planner to use (issue 28;
// docs/compression.md). The user picks the compressor, the planner picks the layers where it pays
// (by predicted time: topo/planner.h). Each method stands in for uncompressed schemes
// (compression_bases): a strategy may use it when it plans one of them (PowerSGD, top-k,
// random-k, sign, qsgd: all-reduce, under allreduce and auto; fp16, bf16: PS's chunks, SFB's
// factors and all-reduce's segments, under ps, poseidon, allreduce and auto; int8: PS's chunks,
// under ps, poseidon and auto).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sync/compress/compressor.h"
#include "sync/option_table.h"

namespace gradmesh::topo {
struct PlannerInput;
}

namespace gradmesh::sync {

/// sync.compression.method's value that compresses nothing (the default).
inline constexpr std::string_view kNoCompression = "none";

/// sync.compression.*.
struct CompressionOptions {
  /// "none"; "powersgd" (Vogels et al., NeurIPS'19: rank-r power iteration with error feedback
  /// and a warm-started Q, on all-reduce); "fp16" or "bf16" (PS's chunks, SFB's factors and
  /// all-reduce's segments in 16 bits); "int8" (PS's chunks, a scale per 512 floats, with error
  /// feedback); "topk" (the largest entries with error feedback, by all-gather),
  /// "randomk" (entries at indices every node draws alike, with error feedback, on a ring),
  /// "sign" (1 bit a float and a scale per 512, with error feedback, by all-gather) or "qsgd"
  /// (`bits` a float, stochastic rounding, with error feedback, by all-gather).
  std::string method = "none";
  std::int64_t rank = 2;  ///< PowerSGD's rank r (>= 1)
  /// Top-k's and random-k's share of a layer's entries sent, in (0, 1]: k = ceil(ratio n).
  double ratio = 0.01;
  std::int64_t start_iteration = 0;  ///< iterations sent uncompressed first (>= 0)
  std::int64_t bits = 4;             ///< qsgd's bits a float: 2, 4 or 8
  /// Top-k and random-k with optimizer.momentum > 0: DGC's momentum correction and momentum
  /// factor masking (Lin et al., ICLR'18, sec. 3.2): each node accumulates its own velocity and
  /// compresses that, the optimizer then steps without momentum (sparse_scheme.h).
  bool momentum_correction = true;

  /// Whether a compressor is asked for (method other than kNoCompression).
  [[nodiscard]] bool compresses() const noexcept { return method != kNoCompression; }
};

/// [sync.compression]: method (none, powersgd, fp16, bf16, int8, topk, randomk, sign, qsgd), rank
/// (integer >= 1, default 2), ratio (a number in (0, 1], default 0.01), start_iteration (integer
/// >= 0, default 0), momentum_correction (a flag, default true), bits (2, 4 or 8, default 4).
[[nodiscard]] OptionTable compression_option_table();

/// The parameters a compressor reads from `options` (ratio, bits), with the scheme's `seed` (the
/// same on every node) and this node's `rank`. Pure.
[[nodiscard]] compress::CompressorParams compressor_params(const CompressionOptions& options,
                                                           std::uint64_t seed,
                                                           std::uint64_t rank) noexcept;

/// The [sync.compression] values of `values` (defaults where unset).
[[nodiscard]] CompressionOptions compression_options(const OptionValues& values);

/// The uncompressed schemes (topo/scheme_model.h ids) compression method `method` stands in for:
/// powersgd, topk, randomk, sign, qsgd -> allreduce; fp16 and bf16 -> ps, sfb, allreduce; int8 ->
/// ps; none for none. Pure.
[[nodiscard]] std::vector<std::string_view> compression_bases(std::string_view method);

/// The methods that stand in for scheme `base` (topo/scheme_model.h id), in table order: for
/// "ps" fp16, bf16, int8. Pure.
[[nodiscard]] std::vector<std::string> methods_for(std::string_view base);

/// The methods exchanged per layer by sparse_scheme.h's scheme (all-reduce's stand-ins that are
/// registered compressors without a segment format: topk, randomk, sign, qsgd), in table order.
/// Their scheme ids and lanes are their names.
[[nodiscard]] std::vector<std::string> gathered_methods();

/// Whether a strategy planning schemes `scheme_ids` can use `method`: none, or one of its bases
/// is among them. Pure.
[[nodiscard]] bool compression_fits(std::string_view method,
                                    const std::vector<std::string>& scheme_ids);

/// Adds the compressed schemes `options` allows to the planner's input, one for each base scheme
/// among input.schemes (powersgd: powersgd_scheme_model; fp16, bf16, int8: ps_coded_scheme_model
/// for ps; fp16, bf16: sfb_half_scheme_model for sfb; for allreduce, a compressor with a segment
/// format (fp16, bf16): allreduce_half_scheme_model, a second bucketed scheme, which make_plan
/// tries in turn; any other: sparse_scheme_model, per layer), last in tie order: of equal times the
/// uncompressed scheme wins. A layer input.fixed_schemes fixes to the base (poseidon's sfb =
/// "always", choose = "bytes") is fixed to the compressed scheme where it fits: the user chose
/// both. Nothing for method none, one node, or a base the strategy does not plan.
void add_compressed_schemes(const CompressionOptions& options, topo::PlannerInput& input);

}  // namespace gradmesh::sync
