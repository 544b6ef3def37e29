#include "sync/compress/compressor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <mutex>

#include "engine/error.h"
#include "sync/compress/builtin_compressors.h"
#include "sync/compress/error_feedback.h"

namespace gradmesh::sync::compress {

void Compressor::check(std::span<const std::byte> in) const {
  if (in.size() != encoded_bytes()) {
    throw ProtocolError(std::string(name()) + " encoding of " + std::to_string(floats()) +
                        " floats: " + std::to_string(in.size()) + " bytes, expected " +
                        std::to_string(encoded_bytes()));
  }
}

void Compressor::mask_sent(std::span<const std::byte>, std::span<float> values,
                           std::uint64_t) const {
  std::fill(values.begin(), values.end(), 0.0f);
}

std::size_t kept_entries(std::size_t floats, double ratio) noexcept {
  if (floats == 0) return 0;
  const double k = std::ceil(ratio * static_cast<double>(floats));
  return std::clamp<std::size_t>(static_cast<std::size_t>(std::max(k, 1.0)), 1, floats);
}

void check_ratio(double ratio) {
  if (!(ratio > 0.0 && ratio <= 1.0)) {
    throw ConfigError("sync.compression.ratio = " + std::to_string(ratio) +
                      ": the share of entries kept must be in (0, 1]");
  }
}

std::string percent_text(double share) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g%%", share * 100.0);
  return text;
}

namespace {

/// The registered compressors. A deque: entries never move, so the pointers find_compressor
/// hands out stay valid while others register.
struct Registry {
  std::mutex mutex;
  std::deque<CompressorEntry> entries;
};

void add(Registry& registry, CompressorEntry entry) {
  GRADMESH_CHECK(!entry.name.empty() && entry.make && entry.encoded_bytes,
                 "register_compressor: a name, a factory and a size");
  for (const CompressorEntry& e : registry.entries) {
    if (e.name == entry.name) {
      throw ContractError("register_compressor: \"" + entry.name + "\" is already registered");
    }
  }
  registry.entries.push_back(std::move(entry));
}

Registry& registry() {
  static Registry* const instance = [] {
    auto* r = new Registry;  // never destroyed: registrations may come from static objects
    for (CompressorEntry& entry : builtin_compressors()) add(*r, std::move(entry));
    return r;
  }();
  return *instance;
}

thread_local int accept_unknown_depth = 0;

}  // namespace

AcceptUnknownCompressors::AcceptUnknownCompressors() noexcept { ++accept_unknown_depth; }
AcceptUnknownCompressors::~AcceptUnknownCompressors() { --accept_unknown_depth; }
bool AcceptUnknownCompressors::active() noexcept { return accept_unknown_depth > 0; }

CompressorDecorator::CompressorDecorator(std::unique_ptr<Compressor> inner, std::string_view who)
    : Compressor(inner != nullptr ? inner->floats() : 0), inner_(std::move(inner)) {
  GRADMESH_CHECK(inner_ != nullptr, std::string(who) + ": no compressor to wrap");
}

std::string compressed_scheme_id(std::string_view base, std::string_view method) {
  return std::string(base) + "_" + std::string(method);
}

const collective::SegmentCodec& segment_format(std::string_view method, std::string_view who) {
  const CompressorEntry& entry = compressor_entry(method);
  GRADMESH_CHECK(entry.segment != nullptr,
                 std::string(who) + ": " + entry.name + " has no segment format");
  return *entry.segment;
}

void register_compressor(CompressorEntry entry) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  add(r, std::move(entry));
}

const CompressorEntry* find_compressor(std::string_view name) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  for (const CompressorEntry& e : r.entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::vector<std::string> compressor_names() {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const CompressorEntry& e : r.entries) names.push_back(e.name);
  return names;
}

const CompressorEntry& compressor_entry(std::string_view name, std::string_view key) {
  if (const CompressorEntry* entry = find_compressor(name)) return *entry;
  std::string known;
  for (const std::string& n : compressor_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError(std::string(key) + ": unknown compressor \"" + std::string(name) +
                    "\" (known: " + known + ")");
}

std::string describe_compressor(const CompressorEntry& entry, const CompressorParams& params) {
  return entry.describe ? entry.describe(params) : entry.name;
}

std::unique_ptr<Compressor> make_compressor(std::string_view name, std::size_t floats,
                                            const CompressorParams& params, bool error_feedback) {
  const CompressorEntry& entry = compressor_entry(name);
  std::unique_ptr<Compressor> compressor = entry.make(floats, params);
  GRADMESH_CHECK(compressor != nullptr && compressor->floats() == floats,
                 "compressor \"" + entry.name + "\": its factory built no compressor of the size");
  if (error_feedback && !entry.traits.lossless) {
    return std::make_unique<ErrorFeedback>(std::move(compressor));
  }
  return compressor;
}

}  // namespace gradmesh::sync::compress
