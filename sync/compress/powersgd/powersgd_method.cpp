// PowerSGD's entry in the table of scheme methods (sync/compress/scheme_method.h): it stands in for
// all-reduce on a layer with a weight matrix, priced by powersgd_model.h, its passes timed at
// start-up on a host model (powersgd_profile.h; on a device they are priced from the GEMM rate
// and the step).

#include <cstddef>
#include <string>
#include <vector>

#include "sync/compress/powersgd/powersgd_model.h"
#include "sync/compress/powersgd/powersgd_profile.h"
#include "sync/compress/scheme_method.h"
#include "sync/plan_input.h"

namespace gradmesh::sync {

SchemeMethod powersgd_method() {
  SchemeMethod method;
  method.name = std::string(kPowerSgdScheme);
  method.bases = {topo::kAllReduceScheme};
  method.model = [](const CompressionOptions& options) {
    return powersgd_scheme_model(static_cast<std::size_t>(options.rank));
  };
  method.measures = [](const tasks::Model& model) { return !model.on_device(); };
  method.measure = [](const CompressionOptions& options, tasks::Model& model, std::uint64_t seed) {
    std::vector<compress::MatrixShape> shapes(model.num_layers());
    for (std::size_t l = 0; l < shapes.size(); ++l) shapes[l] = weight_matrix(model.layer(l));
    // 0.05 s a shape: a round of the 4096 x 4096 layer's first 1024 rows takes about 15 ms.
    return compress::profile_powersgd(static_cast<std::size_t>(options.rank), shapes, 0.05, seed);
  };
  return method;
}

}  // namespace gradmesh::sync
