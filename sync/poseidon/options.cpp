#include "sync/poseidon/options.h"

#include <algorithm>

#include "engine/error.h"
#include "topo/planner.h"
#include "topo/poseidon_cost.h"

namespace gradmesh::sync {

namespace {

bool allowed(const topo::PlannerInput& input, std::string_view id) {
  return std::any_of(input.schemes.begin(), input.schemes.end(),
                     [&](const topo::SchemeModel& m) { return m.id == id; });
}

}  // namespace

OptionTable poseidon_option_table() {
  return {
      "poseidon",
      {choice_key("choose", {"time", "bytes"}), choice_key("sfb", {"auto", "always", "never"})}};
}

PoseidonOptions poseidon_options(const OptionValues& values) {
  return {values.text("poseidon.sfb"), values.text("poseidon.choose")};
}

void apply_poseidon_options(const PoseidonOptions& options, topo::PlannerInput& input) {
  if (options.choose != "time" && options.choose != "bytes") {
    throw ConfigError("sync.poseidon.choose = \"" + options.choose +
                      "\": expected one of time, bytes");
  }
  input.fixed_schemes.resize(input.layers.size());
  if (options.sfb == "never") {
    std::erase_if(input.schemes,
                  [](const topo::SchemeModel& m) { return m.id == topo::kSfbScheme; });
  } else if (options.sfb == "always") {
    for (std::size_t l = 0; l < input.layers.size(); ++l) {
      if (input.layers[l].sufficient_factors && input.layers[l].parameters > 0) {
        input.fixed_schemes[l] = std::string(topo::kSfbScheme);
      }
    }
  } else if (options.sfb != "auto") {
    throw ConfigError("sync.poseidon.sfb = \"" + options.sfb +
                      "\": expected one of auto, always, never");
  }
  if (options.choose == "bytes" && input.nodes > 1) {
    // Poseidon's BestScheme (ATC'17 Algorithm 1) by floats, between SFB and the dense scheme (PS;
    // all-reduce where PS is not allowed: the same floats), fixed layer by layer.
    const bool sfb = allowed(input, topo::kSfbScheme);
    const std::string dense(allowed(input, topo::kPsScheme) ? topo::kPsScheme
                                                            : topo::kAllReduceScheme);
    const bool dense_allowed = allowed(input, dense);
    for (std::size_t l = 0; l < input.layers.size(); ++l) {
      const topo::LayerProfile& layer = input.layers[l];
      if (layer.parameters == 0 || input.fixed_schemes[l]) continue;
      const bool sf = sfb && layer.sufficient_factors;
      if (!sf) {
        if (dense_allowed) input.fixed_schemes[l] = dense;
        continue;  // else: the planner says which layer no scheme fits
      }
      const bool best_sfb =
          !dense_allowed || topo::best_scheme(true, layer.rows, layer.cols, input.batch,
                                              input.nodes, input.nodes) == topo::Scheme::kSfb;
      input.fixed_schemes[l] = std::string(best_sfb ? topo::kSfbScheme : dense);
    }
  }
}

}  // namespace gradmesh::sync
