#include "sync/compress/options.h"

#include <algorithm>
#include <optional>

#include "sync/allreduce/allreduce_scheme.h"
#include "sync/compress/scheme_method.h"
#include "sync/compress/sparse_model.h"
#include "sync/poseidon/sfb_scheme.h"
#include "sync/ps/ps_scheme.h"
#include "topo/planner.h"

namespace gradmesh::sync {

namespace {

/// The uncompressed schemes registered compressor `entry` stands in for, from its declared
/// traits and wire formats (issue 56, item 3: no hand-written table):
///   - a dense one on PS's chunks (compressed PS: the owner decodes each push into its sum and
///     broadcasts the new parameters compressed the same way, ps_scheme.h);
///   - one with a segment format on SFB's factors (each factor one segment, sfb_layer.h);
///   - every lossy one on all-reduce's layers: summed on the ring in its segment format (a second
///     bucketed scheme), else exchanged per layer (sparse_scheme.h: a ring of the kept values for
///     shared indices, all-gather for the rest).
/// The lossless identity ("none") stands in for nothing.
std::vector<std::string_view> bases_of(const compress::CompressorEntry& entry) {
  std::vector<std::string_view> bases;
  if (entry.traits.lossless) return bases;
  if (entry.traits.dense) bases.push_back(topo::kPsScheme);
  if (entry.segment != nullptr) bases.push_back(topo::kSfbScheme);
  bases.push_back(topo::kAllReduceScheme);
  return bases;
}

/// The methods a job may name besides none, in the order plans and errors list them: the scheme
/// methods (scheme_method.h: schemes of their own, such as one that needs a layer's weight
/// matrix), then every registered lossy compressor in registration order.
std::vector<std::string> compression_methods() {
  std::vector<std::string> methods;
  for (const SchemeMethod& method : scheme_methods()) methods.push_back(method.name);
  for (std::string& name : compress::compressor_names()) {
    if (!compress::compressor_entry(name).traits.lossless) methods.push_back(std::move(name));
  }
  return methods;
}

/// The compressed stand-in of `base` for `options` (a base of compression_bases(method)); its
/// model is marked SchemeModel::compressed.
topo::SchemeModel compressed_model(const CompressionOptions& options, std::string_view base) {
  if (const SchemeMethod* method = find_scheme_method(options.method)) {
    return method->model(options);
  }
  const compress::CompressorEntry& entry =
      compress::compressor_entry(options.method, "sync.compression.method");
  if (base == topo::kPsScheme) return ps_coded_scheme_model(entry.name);
  if (base == topo::kSfbScheme) return sfb_segment_scheme_model(entry.name);
  if (entry.segment != nullptr) return allreduce_segment_scheme_model(entry.name);
  return sparse_scheme_model(entry.name, compressor_params(options, 0, 0));
}

/// sync.compression.method: none, a scheme method's or a registered compressor's name, looked up
/// when a config is read (a program registers its own first), or any name under
/// compress::AcceptUnknownCompressors.
OptionKey method_key() {
  std::vector<std::string> methods{std::string(kNoCompression)};
  for (std::string& method : compression_methods()) methods.push_back(std::move(method));
  OptionKey key = choice_key("method", std::move(methods));
  key.expected += " (or a compressor the program registered)";
  key.canonical = [](const OptionValue& value) -> std::optional<OptionValue> {
    const auto* name = std::get_if<std::string>(&value);
    if (name == nullptr || name->empty()) return std::nullopt;
    if (*name == kNoCompression || find_scheme_method(*name) != nullptr ||
        compress::find_compressor(*name) != nullptr ||
        compress::AcceptUnknownCompressors::active()) {
      return value;
    }
    return std::nullopt;
  };
  return key;
}

/// sync.compression.bits: qsgd's bits a float, 2, 4 or 8 (checked here, so a job that never
/// plans qsgd on a layer still refuses another value).
OptionKey bits_key() {
  OptionKey key = integer_key("bits", 2, CompressionOptions{}.bits, "bits a float");
  key.expected = "2, 4 or 8 (qsgd's bits a float)";
  key.canonical = [](const OptionValue& value) -> std::optional<OptionValue> {
    const auto* bits = std::get_if<std::int64_t>(&value);
    if (bits == nullptr || (*bits != 2 && *bits != 4 && *bits != 8)) return std::nullopt;
    return value;
  };
  return key;
}

}  // namespace

OptionTable compression_option_table() {
  return {"compression",
          {method_key(), integer_key("rank", 1, 2, ""),
           fraction_key("ratio", CompressionOptions{}.ratio,
                        "the share of a layer's entries top-k and random-k send"),
           integer_key("start_iteration", 0, 0, "iterations"),
           flag_key("momentum_correction", CompressionOptions{}.momentum_correction), bits_key()}};
}

CompressionOptions compression_options(const OptionValues& values) {
  CompressionOptions o;
  o.method = values.text("compression.method");
  o.rank = values.integer("compression.rank");
  o.ratio = values.number("compression.ratio");
  o.start_iteration = values.integer("compression.start_iteration");
  o.momentum_correction = values.flag("compression.momentum_correction");
  o.bits = values.integer("compression.bits");
  return o;
}

compress::CompressorParams compressor_params(const CompressionOptions& options, std::uint64_t seed,
                                             std::uint64_t rank) noexcept {
  return {.ratio = options.ratio, .seed = seed, .rank = rank, .bits = options.bits};
}

std::vector<std::string_view> compression_bases(std::string_view method) {
  if (const SchemeMethod* scheme = find_scheme_method(method)) return scheme->bases;
  const compress::CompressorEntry* entry = compress::find_compressor(method);
  if (entry == nullptr) return {};
  return bases_of(*entry);
}

std::vector<std::string> methods_for(std::string_view base) {
  std::vector<std::string> methods;
  for (std::string& method : compression_methods()) {
    const std::vector<std::string_view> bases = compression_bases(method);
    if (std::find(bases.begin(), bases.end(), base) != bases.end()) {
      methods.push_back(std::move(method));
    }
  }
  return methods;
}

std::vector<std::string> gathered_methods() {
  std::vector<std::string> methods;
  for (std::string& method : methods_for(topo::kAllReduceScheme)) {
    const compress::CompressorEntry* entry = compress::find_compressor(method);
    if (entry != nullptr && entry->segment == nullptr) methods.push_back(std::move(method));
  }
  return methods;
}

bool compression_fits(std::string_view method, const std::vector<std::string>& scheme_ids) {
  if (method == kNoCompression) return true;
  for (const std::string_view base : compression_bases(method)) {
    if (std::find(scheme_ids.begin(), scheme_ids.end(), base) != scheme_ids.end()) return true;
  }
  return false;
}

void add_compressed_schemes(const CompressionOptions& options, topo::PlannerInput& input) {
  if (!options.compresses() || input.nodes < 2) return;
  for (const std::string_view base : compression_bases(options.method)) {
    const bool planned = std::any_of(input.schemes.begin(), input.schemes.end(),
                                     [&](const topo::SchemeModel& m) { return m.id == base; });
    if (!planned) continue;
    input.schemes.push_back(compressed_model(options, base));
    // A layer the strategy fixed to the base scheme (sync.poseidon.sfb = "always", choose =
    // "bytes") takes the compressor the user asked for, where it fits.
    const topo::SchemeModel& compressed = input.schemes.back();
    for (std::size_t l = 0; l < input.fixed_schemes.size() && l < input.layers.size(); ++l) {
      std::optional<std::string>& fixed = input.fixed_schemes[l];
      if (fixed && *fixed == base && (!compressed.fits || compressed.fits(input.layers[l]))) {
        fixed = compressed.id;
      }
    }
  }
}

}  // namespace gradmesh::sync
