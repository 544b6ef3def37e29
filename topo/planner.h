#pragma once
// The bandwidth-aware planner (DESIGN.md, "The planner is pure"): from the model's layer shapes
// and measured times, the batch size K, the number of nodes n, the measured links and the schemes
// it may use (topo/scheme_model.h: each an id and a cost function; the planner knows none by
// name), the plan the strategies execute — each layer's scheme (PS, SFB, all-reduce bucket,
// another registered scheme, or local), the
// all-reduce buckets (MG-WFBP's merged-gradient layers), the KV chunk size, Ako's partition count p
// (Ako eq. 3), each lane's byte budget, and the predicted bytes and time of one iteration.
//
// The time model: WFBP (Poseidon ATC'17 sec. 3.1; MG-WFBP eqs. 6-8) on one link. The forward
// pass takes t_f = sum of the layers' t_f; backward runs from the last layer to the first; a
// layer's communication starts when its backward has ended and the previous communication has
// ended (topo/merge_planner.h); an SFB layer's backward computes dx only (its measured
// backward_input_seconds); its rebuild GEMM and optimizer step, and an all-reduce bucket's
// layers' steps, run after the communication without holding the link but on the node's
// compute, after the backward pass and the work released before it (the profile timed every
// layer with all of the node's cores, so two compute tasks at once take as long as one after the
// other); a PS layer's step runs on the KV owners chunk by chunk, under the push phase. The
// transport's own work on the bytes (the kernel's copies at both ends: on loopback and veth, on the
// cores that compute) runs on the node's compute beside the backward pass, at the measured
// seconds per byte sent or received (PlannerInput::transport_seconds_per_byte). The
// iteration ends when the last communication or compute ends.
// Each scheme's time and bytes come from its SchemeModel::cost (the built-ins':
// topo/cost_model.h), on the slowest link (slowest_link()).
//
// Thread safety: every function is pure.

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topo/cost_model.h"
#include "topo/partition_count.h"
#include "topo/scheme_model.h"

namespace gradmesh::topo {

/// One layer as the planner sees it; index 0 is the layer nearest the input.
struct LayerProfile {
  std::string name;                 ///< e.g. "dense0"
  std::size_t parameters = 0;       ///< floats (a dense layer: rows x cols + rows of bias)
  bool sufficient_factors = false;  ///< a dense layer whose gradient is U^T V (SFB may apply)
  std::size_t rows = 0;             ///< M, outputs (when sufficient_factors)
  std::size_t cols = 0;             ///< N, inputs (when sufficient_factors)
  double forward_seconds = 0;       ///< t_f^(l), measured, seconds
  double backward_seconds = 0;      ///< t_b^(l), measured, seconds
  /// t_b^(l) without the parameter gradients, seconds: the backward of the layer under SFB,
  /// which rebuilds dW from the factors instead of computing it (the dense layer nearest the
  /// input then computes nothing). nullopt: backward_seconds (SFB saves nothing).
  std::optional<double> backward_input_seconds;
  /// W viewed as a matrix, weight_rows x weight_cols (rows: one per bias: a dense layer's M x N,
  /// a convolution's F x C k^2); 0 x 0 for a layer without weights. Low-rank compression
  /// (PowerSGD) fits a layer by it.
  std::size_t weight_rows = 0;
  std::size_t weight_cols = 0;
  /// The job's compressor (sync.compression.method: fp16, bf16, int8, top-k, random-k) on this
  /// layer's floats as start-up measured it (sync/compress/codec_profile.h; the slowest node):
  /// one encode with error feedback and one decode added into a sum, seconds. nullopt: not
  /// measured; the compressed schemes' cost models then price them in optimizer steps.
  std::optional<CodecSeconds> codec;

  /// t_b^(l) under SFB (`sfb`: backward_input_seconds when set) or another scheme
  /// (backward_seconds), seconds.
  [[nodiscard]] double backward_seconds_under(bool sfb) const noexcept {
    return sfb && backward_input_seconds ? *backward_input_seconds : backward_seconds;
  }
};

/// Everything the planner needs; measurements are taken by net/ and sync/ and passed in.
struct PlannerInput {
  std::vector<LayerProfile> layers;
  std::size_t batch = 1;  ///< K, samples per node per iteration
  std::size_t nodes = 1;  ///< n
  LinkMatrix links;       ///< n x n measured alpha (seconds) and B (bytes/s)
  double gemm_flops = 0;  ///< measured GEMM rate, FLOP/s (needed when SFB may apply)
  /// The optimizer step's time per parameter, seconds/float (measured; 0: steps are free)
  double step_seconds_per_float = 0;
  /// A 16-bit block's encode and decode, seconds/float (measured; 0: ClusterCost's step multiples)
  double half_encode_seconds_per_float = 0;
  double half_decode_seconds_per_float = 0;
  double frame_overhead_bytes = 0;  ///< bytes each message adds besides its payload
  /// What a byte a node sends or receives costs its compute, seconds/byte (measured:
  /// ClusterCost::transport_seconds_per_byte; 0: free)
  double transport_seconds_per_byte = 0;
  std::optional<std::size_t> kv_chunk_bytes;  ///< KV chunk size; nullopt: auto
  std::optional<double> gamma;                ///< Ako's gradient rate, gradients/s; nullopt: no p
  /// The schemes the planner may use (sync::StrategyTraits::schemes' models), in tie order: of
  /// two with the same predicted time the earlier wins.
  std::vector<SchemeModel> schemes;
  /// Per layer (empty, or one entry a layer): the id of a scheme of `schemes` the caller fixes
  /// instead of choosing (`sync.poseidon.sfb = always` fixes SFB on every layer with sufficient
  /// factors; `sync.poseidon.choose = bytes` every layer by Poseidon's BestScheme). Ignored for
  /// one node and for layers without parameters; a fixed layer is never re-bucketed.
  std::vector<std::optional<std::string>> fixed_schemes;
};

/// One layer of the plan.
struct PlannedLayer {
  std::size_t layer = 0;
  std::string name;
  std::string scheme{kLocalScheme};   ///< a SchemeModel::id, or kLocalScheme
  std::size_t parameters = 0;         ///< floats
  std::size_t chunks = 0;             ///< KV chunks (a chunked scheme: PS), else 0
  std::optional<std::size_t> bucket;  ///< index in Plan::buckets (a bucketed scheme's layer)
  /// Bytes this node sends for the layer per iteration (payload + frame overhead; PS: the mean
  /// over nodes). All-reduce: the layer's share of its bucket's payload; the bucket's frame
  /// overheads are charged to its first (sending) layer.
  double bytes_sent = 0;
  double comm_seconds = 0;     ///< t_c: time on the link (a bucket's on its sending layer)
  double compute_seconds = 0;  ///< work after the communication: SFB's rebuild GEMM and step;
                               ///< an all-reduce layer's step
  double encode_seconds = 0;   ///< work before it: a compressor's encode (SchemeCost)
  /// A compressor's encodes and decodes, seconds: encode_seconds and some of compute_seconds
  double codec_seconds = 0;
  /// The transport's work on the layer's bytes, beside the backward pass (SchemeCost; a bucket's
  /// layer: its share of the ring's payload), seconds
  double transport_seconds = 0;
  double backward_start = 0;  ///< tau_b, seconds from the start of the forward pass
  double comm_start = 0;      ///< tau_c, seconds from the start of the forward pass
  /// Each allowed scheme's cost for this layer alone, by id (for the plan table): the schemes
  /// that fit the layer (SFB needs sufficient factors); empty for local layers.
  std::map<std::string, SchemeCost, std::less<>> costs;
};

/// A bucket of consecutive all-reduce layers sent as one ring all-reduce (MG-WFBP): layers
/// first..last (layers without parameters in between carry nothing).
struct Bucket {
  std::size_t first = 0;    ///< lowest layer index: its backward end releases the bucket
  std::size_t last = 0;     ///< highest layer index
  std::size_t floats = 0;   ///< the bucket's parameters
  double bytes_sent = 0;    ///< ring_allreduce_bytes of the bucket
  double comm_start = 0;    ///< seconds from the start of the forward pass
  double comm_seconds = 0;  ///< T_ar(4 floats)
};

/// The planner's output: what each strategy executes and what it should cost.
struct Plan {
  std::vector<PlannedLayer> layers;
  std::vector<Bucket> buckets;         ///< the bucketed scheme's buckets, in send order
  std::size_t kv_chunk_floats = 0;     ///< KV chunk size of the chunked (PS) layers, floats
  std::optional<PartitionChoice> ako;  ///< eq. 3, when gamma was given and the model has parameters
  /// Bytes this node sends per iteration by lane (every lane of the allowed schemes present,
  /// 0 if unused).
  std::map<std::string, double, std::less<>> lane_bytes;
  LinkCost link;            ///< the slowest link the formulas used
  AllReduceCost allreduce;  ///< T_ar(M) = a + b M on that link
  double bytes_sent = 0;    ///< this node per iteration, sum over layers (and lanes)
  /// Bytes per iteration that cross site boundaries, all nodes together (inter_site_bytes() of
  /// each layer's bytes in its scheme's SchemeModel::traffic); 0 without sites.
  double inter_site_bytes = 0;
  double forward_seconds = 0;         ///< t_f
  double backward_seconds = 0;        ///< t_b
  double iteration_seconds = 0;       ///< predicted t_iter (the time model above)
  double gemm_flops = 0;              ///< the GEMM rate the plan assumed (FLOP/s)
  double step_seconds_per_float = 0;  ///< the optimizer step's time the plan assumed (s/float)
  /// What a byte sent or received costs the node's compute, the plan assumed (seconds/byte)
  double transport_seconds_per_byte = 0;
  /// The transport's work over the layers, seconds (on the node's compute, in iteration_seconds)
  double transport_seconds = 0;
  /// With compressed schemes allowed, the two plans make_plan compared (kCompressionMargin):
  /// the predicted t_iter with them and without them, one of which is iteration_seconds; both 0
  /// when none was allowed (or a fixed scheme is compressed).
  double compressed_iteration_seconds = 0;
  double uncompressed_iteration_seconds = 0;
};

/// How much faster than the all-bucketed plan a plan mixing schemes must be predicted to be kept:
/// 10%. Measured on the demo MLP (4 loopback nodes, 2 cores): the plan with the classifier on PS
/// and the rest in an all-reduce bucket, predicted within 1% of all-reduce alone (either side,
/// with the probe's spread), ran 11% slower (medians of 5 alternations; docs/planner.md).
inline constexpr double kMixedPlanMargin = 0.10;

/// How much faster than the best plan without compression a plan using a compressed scheme
/// (SchemeModel::compressed) must be predicted to be kept: 10%. The more plans the planner
/// weighs, the more often the least predicted one is an under-prediction (a winner's curse), and
/// a compressor's passes over the gradient run on the cores the compute uses, beside it, priced
/// from figures measured without the compute beside them: on 4 netns nodes on 2 cores, unshaped
/// links, the large MLP, the plans that put PowerSGD on a layer ran 0.86-0.95 of the SFB plans'
/// speed: the planner had put them ahead on predictions as spread as the SFB plans' (0.77 and
/// 0.90 of the measured iteration; SFB's 0.77-1.07; docs/compression.md, 2026-11-28). Issue 28 asks
/// that configuring a compressor never costs more than 5% where it does not pay.
inline constexpr double kCompressionMargin = 0.10;

/// Whether a plan with compression predicted at `with` seconds an iteration pays against one
/// without it at `without`: with < (1 - kCompressionMargin) without.
[[nodiscard]] inline bool compression_pays(double with, double without) noexcept {
  return with < (1.0 - kCompressionMargin) * without;
}

/// Plans one job. Schemes: with one node, or for a layer without parameters, local; else the
/// fixed one, or the allowed scheme that fits with the least predicted time of the layer alone
/// (its cost's seconds, less the dW time its backward skips; ties to the earlier in
/// input.schemes). When a bucketed scheme is allowed and no layer is fixed, the plan that puts
/// every layer with parameters on it is also tried, and kept if its predicted iteration is
/// shorter (many small layers: one bucket pays the ring's start-up once, which a choice layer by
/// layer cannot see; PS pays 2 alpha and SFB alpha per layer) — or, when the layer-by-layer plan
/// mixes schemes, shorter than kMixedPlanMargin more than the mixed plan's: schemes in one
/// iteration run their protocols at once, contending for the link and the cores in ways the cost
/// model does not price. Buckets: optimal_merge_set()
/// over the whole pipeline. KV chunk: kv_chunk_bytes / 4 (at least 1), else
/// KvPlacement::auto_chunk_floats(floats of the chunked layers, n), as the PS stage places them
/// (the choice itself assumes the auto size of all the model's floats). Ako: partitions_for
/// (gamma, all floats, n, B of the slowest link).
/// Throws ContractError (printing the bad value) on n == 0, a link matrix that is not n x n or
/// has a bad alpha or B, K == 0, a negative or non-finite time, a sufficient-factor layer whose
/// parameters are not rows x cols + rows, gemm_flops <= 0 when SFB may apply, two schemes of one
/// id, a fixed scheme that is not allowed or does not fit, or a layer with parameters that no
/// allowed scheme fits.
///
/// Several bucketed schemes (all-reduce and its 16-bit form): a plan holds one (a bucket is one
/// ring), so the job is planned with each in turn, the others left out, and the shortest
/// predicted iteration is kept (ties: the earlier in input.schemes); not with one that fixed
/// schemes leave out.
///
/// Compressed schemes (SchemeModel::compressed) allowed: the job is also planned without them,
/// and the plan with them is kept only when its predicted iteration is shorter than
/// (1 - kCompressionMargin) times that plan's (Plan::uncompressed_iteration_seconds holds it);
/// else the plan without compression, with every allowed scheme's lanes at 0 bytes. Not when a
/// fixed scheme is compressed, or when every allowed scheme is.
[[nodiscard]] Plan make_plan(const PlannerInput& input);

/// What the cost formulas see of `input`: n, its slowest link (traffic_link(kRing): slowest_link
/// without sites; with sites also the all-to-all and star links), the frame overhead and the
/// measured GEMM, step, 16-bit and transport rates. Pure; checks only the links.
[[nodiscard]] ClusterCost cluster_cost(const PlannerInput& input);

}  // namespace gradmesh::topo
