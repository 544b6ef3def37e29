#pragma once
// The parameter-server scheme for a set of layers: Poseidon's KV store colocated on every node with
// wait-free backpropagation (Poseidon ATC'17 sec. 3.1 WFBP, sec. 4.1 KV store and syncer).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "net/payload.h"
#include "sync/compress/codec.h"
#include "sync/compress/device_codec.h"
#include "sync/compress/figures.h"
#include "sync/compress/options.h"
#include "sync/lane_router.h"
#include "sync/layer_arrivals.h"
#include "sync/ps/kv_shard.h"
#include "sync/scheme.h"
#include "sync/sync_stage.h"
#include "topo/kv_placement.h"

namespace gradmesh::sync {

/// The scheme id of compressed PS with compressor `method` ("ps_int8"; issue 28). Pure.
[[nodiscard]] std::string ps_coded_scheme_id(std::string_view method);

/// Compressed PS as the planner sees it (`method` a dense registered compressor: fp16, bf16,
/// int8): chunked like topo::ps_scheme_model, both phases carrying the chunks' encodings
/// (topo::ps_cost's payload_bytes: the compressor's encoded_bytes of each chunk) on the lanes
/// kv_push_coded and
/// kv_broadcast_coded; and per float of the layer, a mean node's CPU: one encode (the (n - 1)/n
/// it pushes, the 1/n it owns and broadcasts) and (2n - 1)/n decodes (the owner's of n - 1
/// pushes, every node's of the n - 1 others' broadcasts, the owner's own), at the layer's
/// measured topo::LayerProfile::codec when start-up measured it, else at the compressor's cost
/// entry (CompressorEntry::cost, optimizer steps a float). That CPU
/// time t_cpu pipelines with the link's t_c chunk by chunk (a chunk is sent as it is encoded,
/// decoded as it arrives), so the work after the communication is
///   codec_seconds = max(0, t_cpu - t_c) + min(t_cpu, t_c) / chunks
/// (the excess of the CPU over the link, and one chunk's share: the first encode, the last
/// decode). On a slow link the encodes hide behind it; on a fast one they are paid in full. Throws
/// ConfigError for an unknown compressor, ContractError for a sparse or lossless one.
[[nodiscard]] topo::SchemeModel ps_coded_scheme_model(std::string_view method);

/// One iteration, for each of its layers l:
///   push_l (network task, right after backward_l) sends each KV chunk of l's gradient to its
///   owner — zero-copy views of the model's gradient buffer; the owner's KvShard counts the n
///   pushes (BSP), sums them in rank order, steps the node's optimizer on its master copy and
///   broadcasts the chunk; pull_l (deferred: holds no thread) ends when all of l's chunks are back.
/// The update equals single-process SGD on the union of the n batches (mean loss).
///
/// Buffer safety without copies: a node's gradient buffer is rewritten only by the next
/// iteration's backward, which starts after every chunk came back — so after every owner fully read
/// this node's pushes; a shard's master chunk changes only after the next round's n pushes, which
/// each node sends only after it received this round's broadcast.
///
/// Compressed (`wire` a dense compressor: fp16, bf16 or int8; issue 28, as BytePS compresses both
/// directions of its PS, docs/gradient-compression.md): a node encodes each chunk it pushes to a
/// remote owner with error feedback (compress::Codec: p = g + e, C(p) sent, e = p - D(C(p)) kept;
/// its own chunks go as floats: nothing crosses a wire); the owner decodes the pushes, sums them in
/// rank order in fp32, scales by 1/n and steps its master copy as above. The owner cannot send the
/// master copy itself in 8 or 16 bits (the parameters would lose what each rounding drops, every
/// iteration); it sends the change d = master - replica, encoded, and every node, the owner too,
/// adds D(C(d)) to its replica. The replica thus trails the master copy by exactly what the last
/// encode lost, which the next d carries again: error feedback with the residual master -
/// replica (BytePS re-encodes the summed gradient with a server-side residual; here the owner
/// steps, so the residual is on the parameters). Every replica holds the same bits; the master
/// copies differ from them by at most one rounding of d. The first `start_iteration` iterations
/// of each layer (counted per layer, checkpointed) go as floats. Wire bytes per chunk: its
/// encoding (the compressor's encoded_bytes) in both phases, on the lanes kv_push_coded and
/// kv_broadcast_coded. A malformed encoding is rejected through the router, counted, logged and
/// dropped (its size and Codec::check, before it reaches a sum or a replica). On a device model
/// (compute.device = "cuda") a node encodes its pushes of at least kMinDeviceChunkFloats floats on
/// the device (compress::DeviceCodec: the same bytes and residual, bit for bit; only the
/// encoding is downloaded; smaller chunks from the host copy, as on a CPU), so the push tasks run
/// on the Model's thread and hand the owner's own chunks' reduction to the network arena; the
/// owner's side (the sum, the step, the encoded change) stays on the host.
///
/// Errors: fail_all() (a peer failure) fails the waiting tasks; a push that is sent to a failed
/// peer throws its PeerError from the push task; a message that breaks the protocol is rejected
/// through the router. Thread safety: build() before the first run; the rest from tasks and the
/// delivery thread (internally locked).
class PsScheme final : public Scheme {
 public:
  /// On a device model, a pushed chunk of fewer floats is encoded from the host copy on the host:
  /// a device encode costs a few kernel launches and two synchronous downloads, tens of
  /// microseconds, more than the host's encode of so few floats (a few ns a float here).
  static constexpr std::size_t kMinDeviceChunkFloats = 16384;

  /// `layers`: the layers (with parameters) this scheme synchronises; `chunk_floats`: the KV chunk
  /// size; `wire`: "none" (floats), or the registered compressor of compressed PS (a dense one:
  /// fp16, bf16, int8) with `start_iteration` uncompressed iterations first. Routes the kv_push
  /// and kv_broadcast lanes on `router` (the coded ones for a compressed wire). Throws
  /// ConfigError for an unknown compressor, ContractError for a sparse one.
  PsScheme(const SyncContext& ctx, LaneRouter& router, const std::vector<std::size_t>& layers,
           std::size_t chunk_floats, std::string_view wire = kNoCompression,
           std::uint64_t start_iteration = 0);

  /// Adds push_l -> pull_l after tasks.backward[l], before tasks.done, for each of its layers.
  void build(engine::Graph& graph, const IterationTasks& tasks) override;
  /// Uncompressed: nothing. Compressed: whether the master copies differ from the replica, and
  /// then the owned master copies; each layer's iterations; the push codecs' residuals. Between
  /// iterations only.
  void save_state(engine::StateWriter& out) override;
  /// Refreshes the KV shard's master copies from the replica after a checkpoint was loaded into
  /// it (KvShard::reload); compressed, then reads what save_state() wrote (the saved master
  /// copies where they differed). Throws CheckpointError for state of another shape. Between
  /// iterations only.
  void load_state(engine::StateReader& in) override;
  /// Fails every waiting and later pull with `error`.
  void fail_all(std::exception_ptr error) override;
  /// "PS", or "PS int8" ("PS fp16", "PS bf16").
  [[nodiscard]] std::string describe(std::size_t layer) const override;
  /// Compressed: per layer over the iterations since the last call, of the chunks this node
  /// pushed encoded: "compression_error.<l>", "residual_norm.<l>", "residual_ratio.<l>"
  /// (compress::CompressionFigures).
  void epoch_figures(std::map<std::string, double>& out) override;

  [[nodiscard]] const topo::KvPlacement& placement() const noexcept { return placement_; }
  /// KV chunks of layer l (0 unless it is one of this scheme's layers).
  [[nodiscard]] std::size_t chunks(std::size_t layer) const override;
  /// Wire bytes this rank sends for layer l per iteration: its pushes to remote owners plus n - 1
  /// copies of each chunk it owns (payload + frame overhead). Over all nodes this averages
  /// Poseidon's 2MN(P1 + P2 - 2)/P2 floats (ATC'17 Table 1, P1 = P2 = n).
  [[nodiscard]] double bytes_sent(std::size_t layer) const override;

 private:
  /// A chunk's compression state (compressed PS only). Not owned here: the push codec (error
  /// feedback; it also decodes the owner's broadcasts) and this node's encoding. Owned: the
  /// codec of the change broadcast (no residual: master - replica is), the change, its encoding.
  struct CodedChunk {
    std::unique_ptr<compress::Codec> codec;
    // A pushed chunk of a device model: encoded on the device from the gradient backward left
    // there (the residual lives there; `codec` then decodes nothing of it).
    std::unique_ptr<compress::DeviceCodec> device_codec;
    /// The codec that holds the push's residual (checkpoints): the device's, else the host's.
    engine::Checkpointable& residual_owner() {
      return device_codec ? static_cast<engine::Checkpointable&>(*device_codec) : *codec;
    }
    std::vector<std::byte> wire;
    std::vector<float> change;
  };

  void push_layer(std::size_t layer, std::uint64_t round);
  void on_push(std::size_t from, net::Message&& message);
  void on_parameters(std::size_t from, net::Message&& message);
  void accept_push(std::size_t from, std::size_t chunk, std::uint64_t round, net::Payload payload,
                   bool coded);
  void reduce_and_broadcast(std::size_t chunk, std::uint64_t round);
  /// Chunk `chunk`'s span of its layer's host parameters (the replica).
  [[nodiscard]] std::span<float> replica(std::size_t chunk) const;
  void arrive(std::size_t chunk, std::uint64_t round, std::size_t from);
  [[nodiscard]] bool coded() const noexcept { return wire_ != nullptr; }
  /// Some pushes are encoded on the device (compressed PS on a device model, a chunk of at
  /// least kMinDeviceChunkFloats): push tasks then run on the Model's thread.
  [[nodiscard]] bool device_pushes() const noexcept { return device_pushes_; }

  const SyncContext& ctx_;
  LaneRouter& router_;
  const compress::CompressorEntry* wire_;  // compressed PS's compressor; nullptr: floats
  std::uint64_t start_iteration_;
  topo::KvPlacement placement_;
  LaneId push_lane_, broadcast_lane_;
  KvShard shard_;
  LayerArrivals arrivals_;
  // Compressed only: by chunk id; by model layer (iterations pushed, the figures and names).
  std::vector<CodedChunk> coded_;
  bool device_pushes_ = false;  // some chunk's device_codec is set
  std::vector<std::uint64_t> done_;
  std::vector<compress::CompressionFigures> figures_;  // under figures_mutex_
  std::vector<std::string> names_;
  std::mutex figures_mutex_;
  std::atomic<bool> master_differs_{false};  // a change was broadcast since construction or load
};

}  // namespace gradmesh::sync
