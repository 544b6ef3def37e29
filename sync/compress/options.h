#pragma once
// [sync.compression]: the gradient compressor a job allows the planner to use (issue 28;
// docs/compression.md). The user picks the compressor, the planner picks the layers where it pays
// (by predicted time: topo/planner.h). Each method stands in for uncompressed schemes
// (compression_bases), derived from the compressor's registered traits and formats, not a table:
// a strategy may use it when it plans one of them. As registered: PowerSGD, top-k, random-k:
// all-reduce (allreduce, auto); int8, sign, qsgd: PS's chunks and all-reduce (ps, poseidon,
// allreduce, auto); fp16, bf16: PS's chunks, SFB's factors and all-reduce's segments (all four).

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
  /// and a warm-started Q, on all-reduce); or a registered compressor's name: "fp16" or "bf16"
  /// (16 bits), "int8" (a scale per 512 floats), "topk" (the largest entries), "randomk" (entries
  /// at indices every node draws alike), "sign" (1 bit a float and a scale per 512) or "qsgd"
  /// (`bits` a float, stochastic rounding), each lossy one with error feedback, on the schemes
  /// compression_bases names; or one a program registered (compress::register_compressor).
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

/// The uncompressed schemes (topo/scheme_model.h ids) compression method `method` stands in for,
/// in this order: ps for a dense compressor (CompressorTraits::dense), sfb for one with a segment
/// format, allreduce for every lossy one and for powersgd; nothing for none or an unregistered
/// name. So powersgd, topk, randomk -> allreduce; int8, sign, qsgd -> ps, allreduce; fp16, bf16 ->
/// ps, sfb, allreduce. Thread-safe (reads the compressor registry).
[[nodiscard]] std::vector<std::string_view> compression_bases(std::string_view method);

/// The methods that stand in for scheme `base` (topo/scheme_model.h id): powersgd first, then the
/// registered compressors in registration order (for "ps": fp16, bf16, int8, sign, qsgd).
/// Thread-safe.
[[nodiscard]] std::vector<std::string> methods_for(std::string_view base);

/// The methods exchanged per layer by sparse_scheme.h's scheme (all-reduce's stand-ins that are
/// registered compressors without a segment format: int8, topk, randomk, sign, qsgd and any a
/// program registered), in registration order. Their scheme ids and lanes are their names.
[[nodiscard]] std::vector<std::string> gathered_methods();

/// Whether a strategy planning schemes `scheme_ids` can use `method`: none, or one of its bases
/// is among them. Pure.
[[nodiscard]] bool compression_fits(std::string_view method,
                                    const std::vector<std::string>& scheme_ids);

/// Adds the compressed schemes `options` allows to the planner's input, one for each base scheme
/// among input.schemes (powersgd: powersgd_scheme_model; ps: ps_coded_scheme_model; sfb:
/// sfb_segment_scheme_model; for allreduce, a compressor with a segment
/// format (fp16, bf16): allreduce_segment_scheme_model, a second bucketed scheme, which make_plan
/// tries in turn; any other: sparse_scheme_model, per layer), last in tie order: of equal times the
/// uncompressed scheme wins. A layer input.fixed_schemes fixes to the base (poseidon's sfb =
/// "always", choose = "bytes") is fixed to the compressed scheme where it fits: the user chose
/// both. Nothing for method none, one node, or a base the strategy does not plan.
void add_compressed_schemes(const CompressionOptions& options, topo::PlannerInput& input);

}  // namespace gradmesh::sync
