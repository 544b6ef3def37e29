#include "sync/compress/compression_profile.h"

#include <vector>

#include "sync/compress/scheme_method.h"

namespace gradmesh::sync {

namespace {
/// The scheme method `compression` names, if start-up times it on `model`; else nullptr.
const SchemeMethod* measured_scheme_method(const CompressionOptions& compression,
                                           const tasks::Model& model) {
  const SchemeMethod* method = find_scheme_method(compression.method);
  return method != nullptr && method->measures(model) ? method : nullptr;
}
}  // namespace

bool measures_compression(const CompressionOptions& compression, const tasks::Model& model) {
  return compress::measures_codec(compression.method) ||
         measured_scheme_method(compression, model) != nullptr;
}

std::optional<compress::CodecProfile> measure_compression(const CompressionOptions& compression,
                                                          tasks::Model& model, std::uint64_t seed) {
  if (const SchemeMethod* method = measured_scheme_method(compression, model)) {
    return method->measure(compression, model, seed);
  }
  if (!compress::measures_codec(compression.method)) return std::nullopt;
  std::vector<std::size_t> floats(model.num_layers());
  for (std::size_t l = 0; l < floats.size(); ++l) floats[l] = model.layer(l).parameter_count();
  // On a GPU the pushes are encoded there (DeviceCodec, where its kernels implement the
  // compressor): its encodes are what the plan prices.
  return compress::profile_codec(compression.method, compressor_params(compression, seed, 0),
                                 floats, 0.01, seed,
                                 model.on_device() ? &model.backend() : nullptr);
}

}  // namespace gradmesh::sync
