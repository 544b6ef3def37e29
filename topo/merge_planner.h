#pragma once
// Wait-free backpropagation's timeline and the merged-gradient layers of MG-WFBP (Shi and Chu,
// "MG-WFBP": sec. II-C eqs. 6-8, sec. III Definition 1 and Conditions 14-16, sec. IV Theorem 1
// and Algorithm 1), generalised to a plan that mixes schemes on one link.
//
// Layers are indexed 0..L-1 with 0 the layer nearest the input (the paper's layer l is index
// l - 1). Backward runs from L-1 down to 0; a layer's communication can start when its backward
// has ended. How the one link is shared is the caller's choice (LinkSharing):
//  - the paper's (no class weights): communications run one at a time in backward order, first
//    come first served (eq. 7);
//  - the transport's (net/tcp/send_scheduler.h, class weights given): traffic classes (the lanes a
//    scheme sends on) share the link by weight, start-time fair queuing (Poseidon arXiv'15 sec.
//    4.3.3, the weights the plan's byte budgets), and within a class the lowest layer ready goes
//    first, overtaking a higher one part-sent (every message carries its layer index as
//    priority, so that the layers the next forward pass needs first arrive first). Modelled as a
//    fluid: a class's share goes wholly to its lowest ready layer. The link's last end is the same
//    as first come first served whenever one class is busy (either order keeps the link busy);
//    what moves is which layer ends last, and so which work after communication (an SFB
//    rebuild's GEMM) runs after the link's end.
//
// A layer is one of:
//  - all-reduce: allreduce_bytes > 0; t_c = T_ar(bytes) (eq. 17), unless it is a merged-gradient
//    layer: then t_c = 0 and its bytes go with the next all-reduce layer below (eqs. 14-16);
//    its after_comm_seconds (the optimizer step) is work on the node's compute, released when
//    its bucket has been reduced;
//  - fixed: a PS or SFB layer: comm_seconds on the link, then after_comm_seconds of work that does
//    not hold the link (SFB's rebuild GEMM) but the node's compute: it starts when its
//    communication has ended, the backward pass has ended and the work after the layers sent
//    before it has ended (the per-layer times are measured with all of the node's cores, so
//    compute tasks side by side take as long as one after the other; that the engine may
//    interleave a rebuild with the backward pass changes which ends first, not the last end);
//  - local: nothing to send (no parameters). It only adds its backward time.
// A layer's merge partner is the next non-local layer below it; layer l may be merged only if l
// and its partner are all-reduce layers (a bucket never spans a PS or SFB layer).
//
// Thread safety: every function is pure. Errors: ContractError (printing the bad value) on a
// negative or non-finite time or size, a layer both all-reduce and fixed, or a merged-gradient
// layer that cannot merge.

#include <cstddef>
#include <span>
#include <vector>

#include "topo/cost_model.h"

namespace gradmesh::topo {

/// One layer of the pipeline.
struct WfbpLayer {
  double backward_seconds = 0;    ///< t_b^(l), seconds
  double allreduce_bytes = 0;     ///< p^(l) in bytes for an all-reduce layer, else 0
  double comm_seconds = 0;        ///< a fixed (PS, SFB) layer's time on the link, seconds
  double after_comm_seconds = 0;  ///< a fixed layer's work after its communication, seconds
  /// The node's compute time its transport spends moving the layer's bytes (sent and received:
  /// ClusterCost::transport_seconds_per_byte), seconds: work beside the backward pass that no
  /// communication hides (the cores that compute also copy the bytes)
  double transport_seconds = 0;
  /// The traffic class (lane) the layer's communication goes in: an index into
  /// LinkSharing::class_weights; ignored under first come first served
  std::size_t traffic_class = 0;
};

/// How the layers' communications share the one link (see the top of this file).
struct LinkSharing {
  /// Per traffic class, its weight (> 0, finite; any unit: the plan's bytes per iteration on the
  /// class's lane). Empty: first come first served in backward order (MG-WFBP eq. 7).
  std::vector<double> class_weights;
};

/// Timestamps of one iteration, seconds from the start of the forward pass.
struct WfbpTimeline {
  std::vector<double> backward_start;  ///< tau_b^(l) (eq. 6)
  /// tau_c^(l): when the layer's communication first holds the link (eq. 7; eq. 15 for
  /// merged-gradient layers). Shared by classes: a layer with nothing to send (local, merged)
  /// reads the end of its backward.
  std::vector<double> comm_start;
  std::vector<double> comm_seconds;  ///< t_c^(l): its time alone on the link (T_ar of the pending
                                     ///< bucket, 0 when merged)
  /// When the layer's communication has ended, seconds from the start of the forward pass:
  /// comm_start + comm_seconds first come first served; later when a class shares the link with
  /// others or a lower layer overtakes it.
  std::vector<double> comm_end;
  /// t_iter: when the last communication (and SFB rebuild) has ended, at least when the backward
  /// pass has ended. For all-reduce layers only this is eq. 8, tau_c^(1) + t_c^(1).
  double iteration_seconds = 0;
};

/// Eqs. 6-8 (plus the compute queue) for `layers` with forward time t_f (`forward_seconds`) and the
/// merged-gradient layers `merged` (indices, any order), bucket costs by `cost`:
///   tau_b[L-1] = t_f,            tau_b[l] = tau_b[l+1] + t_b[l+1];
///   tau_c[L-1] = tau_b[L-1] + t_b[L-1],
///   tau_c[l]   = max(tau_c[l+1] + t_c[l+1], tau_b[l] + t_b[l]);   (first come first served)
///   end[l]     = tau_c[l] + t_c[l], or shared by classes: each layer's t_c of link time, from
///                tau_b[l] + t_b[l] on, served as the top of this file says;
///   c          = tau_b[0] + t_b[0] + sum_l transport[l] (the transport's work on the cores, beside
///                the backward pass), then for each layer l whose communication ends a bucket or
///                is a fixed layer's, in the order of end[l] (ties: from L-1 down):
///                c = max(c, end[l]) + A[l], A[l] = after[l] (fixed) or the sum of after over the
///                bucket (the compute's queue);
///   t_iter     = max(c, max_l end[l]).
/// A bucket goes in the class of its lowest layer (the one that closes it) with that layer's
/// index as priority. Errors as the top of this file, and a class weight <= 0 or not finite, or a
/// layer's traffic_class without a weight (when weights are given).
[[nodiscard]] WfbpTimeline wfbp_timeline(double forward_seconds, std::span<const WfbpLayer> layers,
                                         AllReduceCost cost, std::span<const std::size_t> merged,
                                         const LinkSharing& sharing = {});

/// wfbp_timeline(...).iteration_seconds.
[[nodiscard]] double wfbp_iteration_seconds(double forward_seconds,
                                            std::span<const WfbpLayer> layers, AllReduceCost cost,
                                            std::span<const std::size_t> merged,
                                            const LinkSharing& sharing = {});

/// MG-WFBP Algorithm 1 as printed (Theorem 1, with the `< a` of the statement): for l from L-1
/// down to 1, if l can merge into its partner j and (tau_b[j] + t_b[j]) - tau_c[l] < a (the
/// paper's tau_b^(l-2) - tau_c^(l) < a: the partner's gradient is ready less than one start-up
/// after l could start sending), merge l into j and recompute tau_c. O(L^2). Returns the
/// merged-gradient layers in the order found (descending).
///
/// Not always optimal: Theorem 1's proof shows that merging makes the partner's communication
/// start earlier, but the merged bytes are then sent later, with the partner's. E.g. a = 1 s,
/// b = 0.1 s/byte, p = (1, 1, 100) bytes, t_b = (0.9, 0.9, 0) s, t_f = 0: Algorithm 1 merges
/// layers 2 and 1 (13.0 s); sending layer 2 at once and merging 1 into 0 takes 12.2 s. The
/// planner uses optimal_merge_set(); this one is kept to compare with the paper.
[[nodiscard]] std::vector<std::size_t> mg_wfbp_merge_set(double forward_seconds,
                                                         std::span<const WfbpLayer> layers,
                                                         AllReduceCost cost);

/// The merged-gradient layers that minimise wfbp_iteration_seconds() (MG-WFBP's problem,
/// eq. 23, solved exactly): a dynamic program over buckets in backward order. E[k], the earliest
/// time the link is free after the bucket that ends at non-local layer k is sent, is
/// min over the bucket's top layer i of max(E[above i], ready[k]) + T_ar(bytes of i..k); a fixed
/// layer has one choice. Every later time is non-decreasing in E, so keeping the least E at each
/// layer is optimal for the link (ties: the smaller bucket). With no work after all-reduce layers
/// it minimises wfbp_iteration_seconds() exactly (the compute queue's end is non-decreasing in
/// the communication ends too); work after all-reduce layers (their optimizer steps) moves with
/// the buckets, which the link's times alone do not see, so then the set is optimal for the link
/// and the planner times it with the steps. The link is first come first served's; the planner
/// times the set found on the transport's shared link (LinkSharing), where it is optimal for the
/// link's last end while one class is busy and not proven optimal otherwise. O(L^2). Returns the
/// merged-gradient layers in descending order.
[[nodiscard]] std::vector<std::size_t> optimal_merge_set(double forward_seconds,
                                                         std::span<const WfbpLayer> layers,
                                                         AllReduceCost cost);

}  // namespace gradmesh::topo
