#pragma once
// Building blocks of every strategy's per-layer plan (SyncStage::plan()).

#include <cstddef>
#include <string_view>

#include "sync/sync_stage.h"

namespace gradmesh::sync {

/// The plan row of layer `layer` of `model`: name ("dense0"), shape ("M x N", outputs x inputs),
/// parameter count, and `scheme` — or "-" for a layer without parameters. Traffic fields are 0.
[[nodiscard]] LayerPlan describe_layer(tasks::Model& model, std::size_t layer,
                                       std::string_view scheme);

}  // namespace gradmesh::sync
