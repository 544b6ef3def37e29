#pragma once
// Compression methods that are exchange schemes of their own rather than compressors on a buffer
// (issue 56, item 3): a method that needs more than floats to encode, such as a layer's weight
// matrix (PowerSGD: Vogels, Karimireddy, Jaggi, NeurIPS'19, Alg. 1), registers here what the
// registry of compressors (compressor.h) derives from a compressor's traits: the uncompressed
// schemes it stands in for, its model for the planner, and what start-up measures of it. Nothing
// outside its folder and this table names such a method.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sync/compress/codec_profile.h"
#include "sync/compress/options.h"
#include "tasks/model.h"
#include "topo/scheme_model.h"

namespace gradmesh::sync {

/// A compression method that is a scheme of its own: sync.compression.method = `name`.
struct SchemeMethod {
  /// The method's name in configs, and its scheme's id and lane in plans.
  std::string name;
  /// The uncompressed schemes (topo/scheme_model.h ids) it stands in for.
  std::vector<std::string_view> bases;
  /// Its model for the planner under `options` (SchemeModel::compressed set).
  std::function<topo::SchemeModel(const CompressionOptions& options)> model;
  /// Whether start-up times its passes on `model` (else its model prices them from the measured
  /// GEMM rate and optimizer step).
  std::function<bool(const tasks::Model& model)> measures;
  /// Its passes timed on `model`'s layers (data from `seed`): what the planner prices it at.
  std::function<compress::CodecProfile(const CompressionOptions& options, tasks::Model& model,
                                       std::uint64_t seed)>
      measure;
};

/// Every registered scheme method, in the order plans and errors list them (before the
/// compressors). Thread-safe (built once, immutable).
[[nodiscard]] std::span<const SchemeMethod> scheme_methods();

/// The scheme method named `name`, or nullptr. Thread-safe.
[[nodiscard]] const SchemeMethod* find_scheme_method(std::string_view name);

/// Each method's entry, defined in its folder (sync/compress/<name>/); scheme_methods() lists
/// them.
[[nodiscard]] SchemeMethod powersgd_method();

}  // namespace gradmesh::sync
