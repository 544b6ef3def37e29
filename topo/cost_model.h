#pragma once
// The alpha-beta cost of each way to synchronise one layer, per node per iteration: ring
// all-reduce (MG-WFBP eq. 9 and Table II), a parameter server over KV shards colocated on every
// node (Poseidon ATC'17 sec. 4.1) and sufficient-factor broadcasting (Poseidon sec. 2.1 and 3.2),
// and the single link those formulas use.
//
// Units: alpha in seconds per message, B in bytes/s, sizes in floats (4 bytes) or bytes as named.
// B is what one node can send per second in all (its uplink, as net.max_send_rate paces it): a
// node that sends to several peers at once shares it. Every link is full duplex, so a node
// receives while it sends; the formulas count what a node sends. A phase of m messages written
// back to back costs alpha (the start-up latency, once) + m o (each message's processor time at
// both ends, LogP's overhead o, Culler et al. PPoPP'93: under load it is what a message costs,
// on top of the idle round trip alpha measures) + its bytes / B, each message's bytes including
// its frame overhead (prefix + FlatBuffers header).
//
// Thread safety: every function is pure.

#include <cstddef>
#include <optional>
#include <vector>

namespace gradmesh::topo {

/// The link the cost formulas use.
struct LinkCost {
  double alpha = 0;            ///< seconds of start-up per message (latency)
  double bandwidth = 0;        ///< B, bytes/s one node sends
  double message_seconds = 0;  ///< o, processor seconds each message costs (>= 0)
};

/// Which links a collective loads, and how much of each (traffic_link(), inter_site_bytes()).
enum class Traffic {
  kRing,      ///< each node sends to the next in rank order (ring all-reduce, MG-WFBP)
  kAllToAll,  ///< each node sends to every other at once (PS's push and broadcast, SFB, gathers)
  kStar,      ///< rank 0 sends to and receives from every other (local's quorum rounds)
};

/// Measured alpha and B for every ordered pair of peers (from, to), row-major n x n; the diagonal
/// is unused.
struct LinkMatrix {
  std::size_t nodes = 1;          ///< n
  std::vector<double> alpha;      ///< seconds, alpha[from * nodes + to]
  std::vector<double> bandwidth;  ///< bytes/s, bandwidth[from * nodes + to]
  /// o per node (seconds; index = rank), or empty for 0 everywhere.
  std::vector<double> message_seconds;
  /// Sites (`gradmesh-node simulate --links`; a real node's probe measures pairs only): index =
  /// rank, the site the node is in (0 .. sites - 1); empty: no sites, every pair its own link.
  std::vector<std::size_t> site;
  /// Per site, its uplink: bytes/s that all its nodes together can send to other sites (and, full
  /// duplex, receive), shared by every flow that leaves it. Empty when `site` is.
  std::vector<double> site_uplink;

  /// Every pair with the same alpha (seconds) and B (bytes/s).
  [[nodiscard]] static LinkMatrix uniform(std::size_t nodes, double alpha, double bandwidth);
};

/// The single alpha and B of the cost formulas: the slowest link, max alpha and min B over the
/// ordered pairs (from != to). Why the slowest and not the mean: in BSP every iteration waits for
/// the last peer. Each of the ring all-reduce's 2(n - 1) steps ends when its slowest hop ends, a
/// KV shard reduces a chunk only when all n pushes are in, and a node rebuilds an SFB layer only
/// when all n - 1 peers' factors are in. o: the max over nodes. With one node there is no link:
/// {0, +infinity, 0}. Throws ContractError (printing the bad value) if nodes == 0, the vectors
/// are not n x n (message_seconds: not n and not empty), an alpha or o is negative or not finite,
/// or a B is <= 0 or not finite.
[[nodiscard]] LinkCost slowest_link(const LinkMatrix& links);

/// The single link of the cost formulas for `traffic` on `links`: slowest_link(), with B lowered
/// to what the sites' shared uplinks leave a node (no sites: slowest_link() itself). Each formula
/// charges a node's bytes at B; a site's uplink carries the share of every node's bytes that
/// leaves the site, so B is at most uplink_s x (a node's bytes) / (the uplink's bytes):
///   - kRing: the ring in rank order; c_s of its hops leave site s (1 when the ranks of a site
///     are consecutive: the ring crosses each site boundary once), each carrying what a node
///     sends: B <= uplink_s / c_s;
///   - kAllToAll: each of the h_s nodes of site s sends 1 / (n - 1) of its bytes to each of the
///     n - h_s nodes outside: B <= uplink_s (n - 1) / (h_s (n - h_s));
///   - kStar: rank 0 (in site s0) sends (and receives) n - 1 messages, n - h_s0 of them across
///     its site's uplink; another site s carries h_s of them: B <= uplink_s0 (n - 1) / (n -
///     h_s0) and uplink_s (n - 1) / h_s.
/// Throws ContractError as slowest_link(), and when `site` is not empty but not n long, names a
/// site without an uplink, or an uplink is not finite and > 0.
[[nodiscard]] LinkCost traffic_link(const LinkMatrix& links, Traffic traffic);

/// Bytes that cross site boundaries in all (every site's uplink, outbound, summed) when each
/// node sends `bytes_per_node` bytes in `traffic` (kStar: rank 0 sends it, each other node
/// 1 / (n - 1) of it to rank 0): kRing: sum_s c_s bytes_per_node; kAllToAll: sum_s h_s (n - h_s)
/// / (n - 1) bytes_per_node; kStar: ((n - h_s0) + sum_{s != s0} h_s) / (n - 1) bytes_per_node.
/// 0 without sites or with one node. Throws ContractError as traffic_link().
[[nodiscard]] double inter_site_bytes(const LinkMatrix& links, Traffic traffic,
                                      double bytes_per_node);

/// A phase of `messages` messages written back to back, `bytes` bytes in all (frames included),
/// on `link`: alpha + messages o + bytes / B, seconds. Pure.
[[nodiscard]] double phase_seconds(LinkCost link, double messages, double bytes) noexcept;

/// An all-reduce's cost T_ar(M) = a + b M for a message of M bytes (MG-WFBP eq. 9).
struct AllReduceCost {
  double a = 0;  ///< start-up, seconds
  double b = 0;  ///< seconds per byte
  /// T_ar(bytes) in seconds.
  [[nodiscard]] double seconds(double bytes) const noexcept { return a + b * bytes; }
};

/// Ring all-reduce on n nodes (MG-WFBP Table II, ring row, with the summation term gamma dropped:
/// adding two floats is far cheaper than sending them): 2(n - 1) steps, each one message of M/n
/// bytes to the next node (a phase of one message), so a = 2(n - 1)(alpha + o + h/B) and
/// b = 2(n - 1)/(n B), h = frame overhead bytes (with h = o = 0 exactly Table II's
/// a = 2(n - 1) alpha, b = 2(n - 1) beta / n, beta = 1/B).
/// One node: {0, 0}. Throws ContractError on nodes == 0 or, for n > 1, a bad link.
[[nodiscard]] AllReduceCost ring_allreduce_cost(LinkCost link, std::size_t nodes,
                                                double frame_overhead_bytes = 0);

/// Bytes one node sends in a ring all-reduce of `bytes` bytes: 2(n - 1)/n M payload plus
/// 2(n - 1) frame overheads. One node: 0. Throws ContractError on nodes == 0.
[[nodiscard]] double ring_allreduce_bytes(double bytes, std::size_t nodes,
                                          double frame_overhead_bytes = 0);

/// What synchronising one layer costs one node per iteration under one scheme.
struct SchemeCost {
  double bytes_sent = 0;       ///< payload + frame overhead bytes this node sends
  double messages = 0;         ///< messages this node sends (a mean over nodes for PS)
  double comm_seconds = 0;     ///< time the layer's communication holds the link
  double compute_seconds = 0;  ///< work after the communication that does not hold the link
  /// The CPU time a compressor's encodes and decodes take (PowerSGD: its GEMMs and passes over
  /// the weights), seconds: encode_seconds and the rest of it in compute_seconds; 0 uncompressed.
  double codec_seconds = 0;
  /// The part of codec_seconds that must run before the communication starts (top-k's and
  /// random-k's encode of the layer, PS's encode of the chunks it pushes), seconds: work on the
  /// node's compute right after the layer's backward, which the layer's communication and the
  /// layers below's backward wait for (the planner puts it in the backward chain); not in
  /// compute_seconds. 0 uncompressed.
  double encode_seconds = 0;
  /// The node's compute time its transport spends on the bytes it sends and as many it receives:
  /// 2 bytes_sent ClusterCost::transport_seconds_per_byte, seconds (work on the cores that
  /// compute, beside the backward pass; the planner fills it in for every scheme alike).
  double transport_seconds = 0;
  /// encode_seconds + comm_seconds + compute_seconds + transport_seconds: the layer's cost alone.
  [[nodiscard]] double seconds() const noexcept {
    return encode_seconds + comm_seconds + compute_seconds + transport_seconds;
  }
};

/// Where the cost formulas run: n, the link and the per-message and compute constants.
struct ClusterCost {
  std::size_t nodes = 1;            ///< n
  LinkCost link;                    ///< traffic_link(kRing): slowest_link() without sites
  double frame_overhead_bytes = 0;  ///< bytes each message adds besides its payload
  double gemm_flops = 0;            ///< measured GEMM rate, FLOP/s (SFB's rebuild)
  /// The optimizer step's time per parameter, seconds/float (tasks::Sgd on the node's cores: one
  /// pass over w, g and the velocity). 0: steps are free.
  double step_seconds_per_float = 0;
  /// A 16-bit block conversion's CPU time measured at start-up (sync/compress/codec_profile.h,
  /// the slowest node): an encode with its block's scale, and a decode added into a sum,
  /// seconds/float. 0: not measured; then kHalfEncodeSteps and kHalfDecodeSteps optimizer steps.
  double half_encode_seconds_per_float = 0;
  double half_decode_seconds_per_float = 0;
  /// What a byte this node sends or receives costs its compute, seconds/byte: the transport's
  /// CPU time per byte (the kernel's copies and checksums at both ends, framing; on one host,
  /// every node's) over the cores the node's compute gets, as start-up measured them
  /// (sync::NodeProfile::transport_seconds_per_byte, the slowest node). 0: free (not measured).
  /// On loopback and veth the transport and the compute share the cores: 4 netns nodes on 2
  /// cores measured 0.43-0.70 ns a byte (2026-11-28, docs/planner.md).
  double transport_seconds_per_byte = 0;
  /// The links of traffic other than the ring's where they differ from `link` (sites' shared
  /// uplinks: traffic_link()); unset: `link`, the same slowest link for every collective.
  std::optional<LinkCost> all_to_all_link;
  std::optional<LinkCost> star_link;

  /// The link `traffic` sees: `link` for kRing, else all_to_all_link / star_link, else `link`.
  [[nodiscard]] LinkCost link_for(Traffic traffic) const noexcept;

  /// The 16-bit encode's and decode's time per float the cost formulas use: the measured figure,
  /// else kHalfEncodeSteps (kHalfDecodeSteps) x step_seconds_per_float. Seconds/float.
  [[nodiscard]] double half_encode_seconds() const noexcept;
  [[nodiscard]] double half_decode_seconds() const noexcept;
};

/// A compressor's CPU time on one layer, measured at start-up (topo::LayerProfile::codec).
struct CodecSeconds {
  double encode = 0;  ///< one encode of the layer's floats with error feedback, seconds
  double decode = 0;  ///< one decode of an encoding of the layer added into a sum, seconds
};

/// KV chunks of a layer of `floats` floats: ceil(floats / chunk_floats) (topo::KvPlacement never
/// splits a chunk across layers). Throws ContractError if chunk_floats == 0.
[[nodiscard]] std::size_t chunks_of(std::size_t floats, std::size_t chunk_floats);

/// PS over KV shards colocated on every node (Poseidon sec. 4.1, BSP), for a layer of `floats`
/// floats (M = 4 floats bytes) in c = chunks_of(floats, chunk_floats) chunks owned evenly by the n
/// nodes. Push phase: a node sends the (n - 1)/n of the layer's chunks that others own, to their
/// owners; broadcast phase (after the owners have all n pushes, reduced them and stepped the
/// optimizer): a node sends the 1/n it owns to the n - 1 others. Over all nodes each phase sends
/// (n - 1) M bytes in (n - 1) c messages, so the mean node sends
///   bytes_sent = 2 (n - 1)/n (M + c h),   messages = 2 (n - 1) c / n,
/// half in each phase (a node's own figure differs by its share of the KV load, at most a chunk).
/// Each phase is one wave of back-to-back messages from every node at once, and the broadcast
/// cannot start before the push ends (the owner waits for all n pushes), so
///   comm_seconds = 2 alpha + messages o + bytes_sent / B
/// (= 2 alpha + 2 (n - 1)/n M / B without overhead and o); the owner's reduce and optimizer
/// step (n adds per float) are left out: an owner reduces and steps each chunk as its last push
/// arrives, while the others' chunks still arrive (compute_seconds = 0). One node: all 0.
/// `payload_bytes`: the layer's bytes on the wire when not 4 a float (a compressed PS: its
/// chunks' encodings, both phases alike), in place of M. Throws ContractError if chunk_floats == 0.
[[nodiscard]] SchemeCost ps_cost(const ClusterCost& cluster, std::size_t floats,
                                 std::size_t chunk_floats,
                                 std::optional<double> payload_bytes = std::nullopt);

/// SFB (Poseidon sec. 2.1 and 3.2) for an M x N dense layer (rows M, cols N) with batch K per
/// node: a node broadcasts its factors U (K x M) and V (K x N), K (M + N) floats, to the n - 1
/// others, one message each, and receives theirs meanwhile (full duplex):
///   bytes_sent = (n - 1)(4 K (M + N) + h),   comm_seconds = alpha + (n - 1) o + bytes_sent / B;
/// then every node rebuilds dW = sum_p U_p^T V_p over all n nodes, 2 n K M N flops:
///   compute_seconds = 2 n K M N / gemm_flops   (the bias gradient, sum_k U_p, is negligible),
/// plus the optimizer step every node then takes on the layer's M N + M floats.
/// Poseidon picks the scheme by floats (topo::best_scheme); the planner by this time ("beyond
/// Poseidon": on a fast link the rebuild GEMM can cost more than PS's extra bytes). One node:
/// all 0. Throws ContractError if n > 1 and gemm_flops is not finite and > 0.
///
/// `wire`: factors in 16 bits (issue 28, sync/poseidon/sfb_layer.h): 2 bytes a float plus a
/// header per message, and the conversions: this node's K (M + N) floats encoded
/// (ClusterCost::half_encode_seconds() each) and the n nodes' decoded (half_decode_seconds()).
/// A 16-bit conversion's CPU time per float, in optimizer steps over as many floats
/// (ClusterCost::step_seconds_per_float): an encode with its block's scale pass, and a decode
/// added into a sum. bench/codec_step.cpp ("fp16 blk", "bf16 blk": F16C and SSE2 paths) measured
/// 1.4-1.6 and 0.2-0.25 on this project's machine; a CPU without F16C converts fp16 in software,
/// about 5x slower: what start-up measures (ClusterCost::half_encode_seconds_per_float) replaces
/// these in a node's plan.
inline constexpr double kHalfEncodeSteps = 1.5;
inline constexpr double kHalfDecodeSteps = 0.25;

struct FactorWire {
  double bytes_per_float = 4;  ///< 4: floats; 2: fp16, bf16
  double header_bytes = 0;     ///< per message, bytes (the 16-bit wire's scales)
};
[[nodiscard]] SchemeCost sfb_cost(const ClusterCost& cluster, std::size_t batch, std::size_t rows,
                                  std::size_t cols, FactorWire wire = {});

/// Ring all-reduce of one layer of `floats` floats on its own (no merging):
/// bytes_sent = ring_allreduce_bytes(4 floats), messages = 2(n - 1),
/// comm_seconds = ring_allreduce_cost().seconds(4 floats); compute_seconds = the optimizer step
/// every node then takes on the layer's floats. One node: all 0.
[[nodiscard]] SchemeCost allreduce_cost(const ClusterCost& cluster, std::size_t floats);

}  // namespace gradmesh::topo
