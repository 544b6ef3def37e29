#include "sync/poseidon/options.h"

#include "engine/error.h"
#include "topo/planner.h"

namespace gradmesh::sync {

void apply_poseidon_options(const PoseidonOptions& options, topo::PlannerInput& input) {
  input.choose = topo::parse_choose_by(options.choose);
  if (options.sfb == "never") {
    input.schemes.sfb = false;
  } else if (options.sfb == "always") {
    input.fixed_schemes.resize(input.layers.size());
    for (std::size_t l = 0; l < input.layers.size(); ++l) {
      if (input.layers[l].sufficient_factors) input.fixed_schemes[l] = topo::LayerScheme::kSfb;
    }
  } else if (options.sfb != "auto") {
    throw ConfigError("sync.poseidon.sfb = \"" + options.sfb +
                      "\": expected one of auto, always, never");
  }
}

}  // namespace gradmesh::sync
