#include "sync/compress/options.h"

#include <algorithm>
#include <optional>

#include "sync/allreduce/allreduce_scheme.h"
#include "sync/compress/codec.h"
#include "sync/compress/powersgd_model.h"
#include "sync/compress/sparse_model.h"
#include "sync/poseidon/sfb_scheme.h"
#include "sync/ps/ps_scheme.h"
#include "topo/planner.h"

namespace gradmesh::sync {

namespace {

/// Each method and the uncompressed schemes it stands in for.
struct MethodBase {
  std::string_view method;
  std::string_view base;
};
constexpr MethodBase kMethods[] = {{"powersgd", topo::kAllReduceScheme},
                                   {"fp16", topo::kPsScheme},
                                   {"fp16", topo::kSfbScheme},
                                   {"fp16", topo::kAllReduceScheme},
                                   {"bf16", topo::kPsScheme},
                                   {"bf16", topo::kSfbScheme},
                                   {"bf16", topo::kAllReduceScheme},
                                   {"int8", topo::kPsScheme},
                                   {"topk", topo::kAllReduceScheme},
                                   {"randomk", topo::kAllReduceScheme},
                                   {"sign", topo::kAllReduceScheme},
                                   {"qsgd", topo::kAllReduceScheme}};

/// The compressed stand-in of `base` for `options` (a method of kMethods with that base); its
/// model is marked SchemeModel::compressed.
topo::SchemeModel compressed_model(const CompressionOptions& options, std::string_view base) {
  if (options.method == "powersgd") {
    return powersgd_scheme_model(static_cast<std::size_t>(options.rank));
  }
  const compress::CompressorEntry& entry =
      compress::compressor_entry(options.method, "sync.compression.method");
  if (base == topo::kAllReduceScheme && entry.segment == nullptr) {
    return sparse_scheme_model(entry.name, compressor_params(options, 0, 0));
  }
  if (base == topo::kPsScheme) return ps_coded_scheme_model(entry.name);
  if (base == topo::kAllReduceScheme) return allreduce_half_scheme_model(entry.name);
  return sfb_half_scheme_model(compress::parse_codec_kind(options.method));
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
  std::vector<std::string> methods{std::string(kNoCompression)};
  for (const MethodBase& m : kMethods) {
    if (methods.back() != m.method) methods.emplace_back(m.method);
  }
  return {"compression",
          {choice_key("method", methods), integer_key("rank", 1, 2, ""),
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
  std::vector<std::string_view> bases;
  for (const MethodBase& m : kMethods) {
    if (m.method == method) bases.push_back(m.base);
  }
  return bases;
}

std::vector<std::string> methods_for(std::string_view base) {
  std::vector<std::string> methods;
  for (const MethodBase& m : kMethods) {
    if (m.base == base) methods.emplace_back(m.method);
  }
  return methods;
}

std::vector<std::string> gathered_methods() {
  std::vector<std::string> methods;
  for (const MethodBase& m : kMethods) {
    if (m.base != topo::kAllReduceScheme) continue;
    const compress::CompressorEntry* entry = compress::find_compressor(m.method);
    if (entry != nullptr && entry->segment == nullptr) methods.emplace_back(m.method);
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
