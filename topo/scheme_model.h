#pragma once
// A per-layer scheme as the planner prices it (DESIGN.md, "Where the shape goes next": a scheme
// declares its cost function to the planner). The planner (topo/planner.h) knows no scheme by
// name: it plans over the models it is given, each an id, the layers it fits and its cost of one
// layer alone; a scheme that merges layers into ring all-reduce buckets (MG-WFBP) or cuts them
// into KV chunks (Poseidon's KV store) says so, and the planner does the merging or chunking. The
// models of the three built-in schemes are below; their cost functions are topo/cost_model.h's.
// A new scheme brings its own model (sync/scheme.h, SchemeEntry).
//
// Thread safety: the types are values; the functions are pure.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "topo/cost_model.h"
#include "topo/lanes.h"

namespace gradmesh::topo {

struct LayerProfile;

/// The scheme of a layer that sends nothing (one node, or no parameters): steps locally.
inline constexpr std::string_view kLocalScheme = "local";
/// The built-in schemes' ids (plan tables, checkpoints' plan signatures, strategy traits).
inline constexpr std::string_view kPsScheme = "ps";                ///< Poseidon sec. 4.1
inline constexpr std::string_view kSfbScheme = "sfb";              ///< Poseidon sec. 2.1, 3.2
inline constexpr std::string_view kAllReduceScheme = "allreduce";  ///< MG-WFBP buckets

/// What a scheme's cost function sees besides the layer.
struct SchemeCostInput {
  const ClusterCost& cluster;       ///< n, the slowest link, frame overhead, GEMM and step rates
  std::size_t batch = 1;            ///< K, samples per node per iteration
  std::size_t kv_chunk_floats = 1;  ///< the plan's KV chunk size (what a chunked scheme cuts by)
};

/// How the planner prices and places one per-layer scheme.
struct SchemeModel {
  std::string id;  ///< unique, not kLocalScheme
  /// Whether the scheme can carry a layer with parameters (empty: every one).
  std::function<bool(const LayerProfile&)> fits;
  /// The layer's cost alone, per node per iteration (bytes_sent, comm_seconds on the slowest
  /// link, compute_seconds after the communication). For a bucketed scheme, its bytes and time
  /// as a bucket of its own (the plan merges and charges buckets instead).
  std::function<SchemeCost(const SchemeCostInput&, const LayerProfile&)> cost;
  /// The transport lanes its bytes go out on, each with its share of a layer's bytes (summing to
  /// 1; a bucketed scheme: the first lane carries its buckets' bytes).
  std::vector<std::pair<std::string, double>> lanes;
  /// Its layers' backward computes dx only: t_b = LayerProfile::backward_input_seconds (SFB).
  bool skips_parameter_gradients = false;
  /// Its layers go into ring all-reduce buckets (topo/merge_planner.h, MG-WFBP): consecutive
  /// layers of it are merged when that shortens the iteration, and a bucket costs
  /// ring_allreduce_cost() of its payload. At most one bucketed scheme per plan (make_plan tries
  /// each of several in turn).
  bool bucketed = false;
  /// A bucketed layer's payload in a bucket, bytes (empty: 4 bytes a parameter).
  std::function<double(const LayerProfile&)> bucket_bytes;
  /// Its layers are cut into KV chunks: the plan's chunk size counts their floats
  /// (KvPlacement::auto_chunk_floats) and PlannedLayer::chunks is set.
  bool chunked = false;
  /// A compressor's stand-in for an uncompressed scheme (issue 28; set by the compressed models:
  /// PowerSGD, top-k, random-k, PS's coded and SFB's and all-reduce's 16-bit forms): make_plan
  /// keeps a plan that uses one only when it is predicted kCompressionMargin faster than the plan
  /// without any.
  bool compressed = false;
  /// How its bytes cross the links (a bucketed scheme: kRing): which link its cost formula
  /// charges (ClusterCost::link_for) and how many of its bytes cross site boundaries.
  Traffic traffic = Traffic::kRing;
};

/// PS over KV shards colocated on every node (ps_cost); chunked; half its bytes pushed, half
/// broadcast; all to all.
[[nodiscard]] SchemeModel ps_scheme_model();
/// SFB (sfb_cost): fits a layer with sufficient factors; skips the dW GEMM of its backward; all
/// to all.
[[nodiscard]] SchemeModel sfb_scheme_model();
/// Ring all-reduce (allreduce_cost), bucketed.
[[nodiscard]] SchemeModel allreduce_scheme_model();

}  // namespace gradmesh::topo
