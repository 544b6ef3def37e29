#include "sync/compress/compression_profile.h"

#include <vector>

#include "sync/compress/powersgd_model.h"
#include "sync/plan_input.h"

namespace gradmesh::sync {

namespace {
bool measures_powersgd(const CompressionOptions& compression, const tasks::Model& model) {
  return compression.method == kPowerSgdScheme && !model.on_device();
}
}  // namespace

bool measures_compression(const CompressionOptions& compression, const tasks::Model& model) {
  return compress::measures_codec(compression.method) || measures_powersgd(compression, model);
}

std::optional<compress::CodecProfile> measure_compression(const CompressionOptions& compression,
                                                          tasks::Model& model, std::uint64_t seed) {
  if (measures_powersgd(compression, model)) {
    std::vector<compress::MatrixShape> shapes(model.num_layers());
    for (std::size_t l = 0; l < shapes.size(); ++l) shapes[l] = weight_matrix(model.layer(l));
    // 0.05 s a shape: a round of the 4096 x 4096 layer's first 1024 rows takes about 15 ms.
    return compress::profile_powersgd(static_cast<std::size_t>(compression.rank), shapes, 0.05,
                                      seed);
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
