#pragma once
// The KV shard colocated on every node: the master copy of the KV chunks this node owns, summing
// the n workers' pushes of each chunk and applying the optimizer step (Poseidon ATC'17 sec. 4.1,
// "KV Store" and "Managing Consistency": a KV pair is broadcast once its count equals the number
// of workers).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "net/payload.h"
#include "sync/compress/codec.h"
#include "tasks/optim/optimizer.h"
#include "topo/kv_placement.h"

namespace gradmesh::sync {

/// Thread safety: push() may be called concurrently from any thread (the loop thread for remote
/// pushes, a network task for the local one); reduce() of a chunk runs once per round, after the
/// push() that returned kReady for it and before the next round's first push of that chunk (BSP
/// guarantees this: no worker pushes round t+1 before it received round t's parameters).
class KvShard {
 public:
  enum class PushResult : std::uint8_t {
    kAccepted,  ///< stored; more pushes of this round are due
    kReady,     ///< the n-th push of the round: call reduce(chunk)
    kRejected,  ///< not a chunk of this shard, wrong size, wrong round or a duplicate: dropped
  };

  /// `placement`: the job's chunk placement (must outlive the shard); `rank`: this node;
  /// `initial`: the model's flat parameter vector (floats), from which the owned chunks' master
  /// copies are taken; `optimizer`: the node's optimizer (must outlive the shard), applied to the
  /// mean gradient with the velocity at each chunk's model offset (the replica's own velocity of
  /// those floats is unused under PS: the replica takes the master copy's parameters).
  /// `wire`: the registered compressor pushes may come encoded in (sync/ps/ps_scheme.h's
  /// compressed PS; "none": floats only).
  KvShard(const topo::KvPlacement& placement, std::size_t rank, std::span<const float> initial,
          tasks::Optimizer& optimizer, std::string_view wire = "none");

  /// Stores worker `from`'s gradient of chunk `chunk` (a global chunk id) for `round`, as floats;
  /// the payload is kept, not copied, until reduce(). `reason` receives why a push was rejected.
  [[nodiscard]] PushResult push(std::size_t from, std::size_t chunk, std::uint64_t round,
                                net::Payload gradient, std::string* reason = nullptr) {
    return store(from, chunk, round, std::move(gradient), false, reason);
  }
  /// The same for a gradient encoded by the shard's wire codec (checked here: its size,
  /// Codec::check); decoded in reduce(). Rejected when the shard's wire is kNone.
  [[nodiscard]] PushResult push_coded(std::size_t from, std::size_t chunk, std::uint64_t round,
                                      net::Payload encoding, std::string* reason = nullptr) {
    return store(from, chunk, round, std::move(encoding), true, reason);
  }

  /// Sums the n stored gradients in rank order (encoded ones decoded: the same float sum, in the
  /// same order, as of their decodings), scales by 1/n (the mean over all nodes' batches, so the
  /// update equals single-process SGD on the union of the batches), applies the optimizer to the
  /// master copy, releases the payloads and opens the next round. Returns the chunk's new
  /// parameters (floats), valid and unchanged until the next reduce() of this chunk. `coded`, when
  /// given, receives whether any push of the round came encoded.
  std::span<const float> reduce(std::size_t chunk, bool* coded = nullptr);

  /// The master copy of every owned chunk (floats, owned order: chunks_owned_by(rank)), for a
  /// checkpoint of a scheme whose replicas are not the master copies (compressed PS). Between
  /// rounds only.
  [[nodiscard]] std::span<const float> master() const noexcept { return master_; }
  /// Writable, for loading such a checkpoint (owned_floats() floats). Between rounds only.
  [[nodiscard]] std::span<float> master() noexcept { return master_; }

  /// Copies the master copy of every owned chunk from `parameters` (the model's flat vector, as
  /// the constructor's `initial`): after a checkpoint was loaded into the replica, which at an
  /// iteration boundary equals every master copy bitwise under BSP (each replica took the
  /// broadcast chunks). Also zeroes this node's velocity of the chunks it does not own (only the
  /// owner steps a chunk; a checkpoint merged from another node count holds the owners' values on
  /// every node). Call between rounds only (no push of the round under way).
  void reload(std::span<const float> parameters);

  /// Floats of master copy held here.
  [[nodiscard]] std::size_t owned_floats() const noexcept { return master_.size(); }

 private:
  struct ChunkState {
    std::mutex mutex;
    std::uint64_t round = 0;  // the round being collected
    std::size_t received = 0;
    std::size_t offset = 0;            // into master_ / scratch_
    std::size_t model_offset = 0;      // into the model's parameters (the optimizer's velocity)
    std::size_t size = 0;              // floats
    std::vector<net::Payload> pushes;  // by rank
    std::vector<std::span<const float>> views;  // by rank, for Sgd::step_sum
    std::vector<std::uint8_t> arrived;          // by rank: not yet, floats or an encoding
    bool any_coded = false;
  };

  PushResult store(std::size_t from, std::size_t chunk, std::uint64_t round, net::Payload payload,
                   bool coded, std::string* reason);

  const topo::KvPlacement& placement_;
  std::size_t rank_;
  std::size_t nodes_;
  tasks::Optimizer& optimizer_;
  std::vector<std::size_t> local_index_;  // global chunk id -> index into states_, or npos
  std::unique_ptr<ChunkState[]> states_;
  std::vector<float> master_;
  std::vector<float> scratch_;
  // Compressed pushes: a decoder per owned chunk (owned order; no residual); empty for kNone.
  std::vector<compress::Codec> decoders_;
};

}  // namespace gradmesh::sync
