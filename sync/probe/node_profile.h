#pragma once
// What each node measured at start-up (sync::LinkProbe's links, tasks/profile.h's times), its
// wire form for the probe's profile exchange, and the job-wide figures the planner takes from the
// n profiles (sync::combine).

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "net/payload.h"
#include "topo/cost_model.h"

namespace gradmesh::sync {

/// What one node measured and computed, exchanged so every node plans from identical input.
struct NodeProfile {
  std::vector<double> alpha;             ///< seconds, this node -> peer (index = rank; own entry 0)
  std::vector<double> bandwidth;         ///< B, bytes/s, this node -> peer (own entry 0)
  std::vector<double> forward_seconds;   ///< t_f per layer, seconds (may be empty)
  std::vector<double> backward_seconds;  ///< t_b per layer, seconds (same size as forward_seconds)
  double gemm_flops = 0;                 ///< FLOP/s (0: not measured)
  double message_seconds = 0;            ///< o, seconds each message of a burst costs (gap)
  /// t_b without the parameter gradients per layer (tasks::LayerTimes::backward_input_seconds),
  /// seconds (same size as forward_seconds)
  std::vector<double> backward_input_seconds;
  /// The optimizer step's time per parameter (tasks::ComputeProfile), seconds/float (0: not
  /// measured)
  double step_seconds_per_float = 0;
  /// What a sealed byte costs the loop threads of its two ends (net::auth::
  /// measure_cipher_seconds_per_byte: seal + open), seconds/byte (0: frames go in clear)
  double cipher_seconds_per_byte = 0;
  /// The job's compressor on each layer (compress::profile_codec): one encode and one decode into
  /// a sum, seconds; empty (not measured: no compressor, or one priced otherwise) or the size of
  /// forward_seconds (0 for a layer without parameters)
  std::vector<double> encode_seconds;
  std::vector<double> decode_seconds;  ///< the same size as encode_seconds
  /// 16-bit blocks (fp16, bf16), seconds/float (0: not measured)
  double half_encode_seconds_per_float = 0;
  double half_decode_seconds_per_float = 0;
  /// What a byte this node sends or receives costs its compute (topo::ClusterCost::
  /// transport_seconds_per_byte): LinkProbe::transport_cpu_seconds_per_byte() over
  /// tasks::ComputeProfile::cpu_cores, seconds/byte (0: not measured, or a compute on a GPU,
  /// which the host's transport does not slow)
  double transport_seconds_per_byte = 0;

  friend bool operator==(const NodeProfile&, const NodeProfile&) = default;
};

/// The job-wide measurements the planner takes (topo::PlannerInput's links, times and GEMM rate).
struct JobMeasurements {
  topo::LinkMatrix links;                ///< alpha (s) and B (bytes/s); row = the measuring node
  std::vector<double> forward_seconds;   ///< per layer, the max over nodes (BSP waits for the last)
  std::vector<double> backward_seconds;  ///< per layer, the max over nodes
  std::vector<double> backward_input_seconds;  ///< per layer, the max over nodes (no dW)
  double gemm_flops = 0;                       ///< FLOP/s, the min over nodes
  double step_seconds_per_float = 0;           ///< seconds/float, the max over nodes
  double cipher_seconds_per_byte = 0;          ///< seconds/byte, the max over nodes (0: in clear)
  /// Per layer, the max over nodes (empty when no node measured its compressor)
  std::vector<double> encode_seconds;
  std::vector<double> decode_seconds;        ///< per layer, the max over nodes (as encode)
  double half_encode_seconds_per_float = 0;  ///< seconds/float, the max over nodes (0: none)
  double half_decode_seconds_per_float = 0;  ///< seconds/float, the max over nodes (0: none)
  double transport_seconds_per_byte = 0;     ///< seconds/byte, the max over nodes (0: none)
};

/// Combines the n profiles (index = rank): the LinkMatrix from their rows (diagonal 0; o per
/// node); per layer
/// the max over nodes of t_f, of t_b and of t_b without dW (in BSP every iteration waits for the
/// slowest node), of the compressor's encode and decode, and of the step's, the cipher's, the
/// 16-bit blocks' and the transport's times; the min GEMM rate. Pure and deterministic, so every
/// node computes the same from exchange()'s result. Throws ContractError (printing the sizes) for
/// no profiles, a row not of size n, or per-layer vectors of different sizes (a profile's encode
/// and decode times may be empty).
[[nodiscard]] JobMeasurements combine(const std::vector<NodeProfile>& profiles);

namespace probe {

/// Why `profile` is not a well-formed profile of a job of `nodes` nodes (sizes, a negative or
/// non-finite value); empty if it is. Pure.
[[nodiscard]] std::string profile_problem(const NodeProfile& profile, std::size_t nodes);

/// `profile` as a kProfile payload: u64 nodes, u64 layers, u64 codec layers (c: 0 or layers),
/// then doubles gemm_flops, message_seconds, step_seconds_per_float, cipher_seconds_per_byte,
/// half_encode_seconds_per_float, half_decode_seconds_per_float, transport_seconds_per_byte,
/// alpha[nodes], bandwidth[nodes], forward_seconds, backward_seconds, backward_input_seconds
/// [layers each], encode_seconds, decode_seconds [c each]; host byte order (the job's nodes share
/// one build, as the handshake's config hash assumes). Bytes: 24 + 8 (7 + 2 nodes + 3 layers +
/// 2 c).
[[nodiscard]] net::Payload encode_profile(const NodeProfile& profile);

/// The profile in `bytes` for a job of `nodes` nodes, or nullopt with `why` set (a short, wrong
/// sized or malformed payload; more than 2^20 layers; codec layers neither 0 nor layers). Never
/// throws beyond std::bad_alloc.
[[nodiscard]] std::optional<NodeProfile> decode_profile(std::span<const std::byte> bytes,
                                                        std::size_t nodes, std::string& why);

}  // namespace probe

}  // namespace gradmesh::sync
