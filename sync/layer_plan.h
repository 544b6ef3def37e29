#pragma once
// Building blocks of every strategy's per-layer plan (SyncStage::plan()).

#include <cstddef>
#include <string_view>

#include "sync/stages.h"
#include "sync/sync_stage.h"

namespace gradmesh::sync {

/// The plan row of layer `layer` of `model`: name ("dense0"), shape ("M x N", outputs x inputs),
/// parameter count, and `scheme` — or "-" for a layer without parameters. Traffic fields are 0.
[[nodiscard]] LayerPlan describe_layer(tasks::Model& model, std::size_t layer,
                                       std::string_view scheme);

/// Bytes one data frame of `stage` and `kind` puts on the socket besides its payload (prefix +
/// FlatBuffers header), for predicting traffic. Thread-safe.
[[nodiscard]] double frame_overhead_bytes(Stage stage, MessageKind kind);

}  // namespace gradmesh::sync
