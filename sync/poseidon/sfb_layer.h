#pragma once
// Sufficient-factor broadcasting for one dense layer (Poseidon ATC'17 sec. 2.1 and 3.2):
// instead of its M x N gradient, a node broadcasts the sufficient factors U (K x M, the output
// gradients of its batch) and V (K x N, the layer's inputs); every node stacks the n pairs in rank
// order and rebuilds the mean gradient with one GEMM, then steps the optimizer itself, so all
// replicas stay identical. On a device model the stack goes to the device and the GEMM runs there
// (rebuild_on_device): only the small factors cross PCIe, never the M x N gradient.
//
// The factors cross the wire as floats, or each factor (U, then V) as one segment of a compressor's
// segment format (collective::SegmentCodec: fp16 with a power-of-two scale, or bf16; issue 28,
// issue 56). Every node, this one included, rebuilds from the decoded factors, so the replicas
// stay identical bit for bit.

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "engine/task.h"
#include "net/payload.h"
#include "sync/collective/latch.h"
#include "sync/collective/segment_codec.h"
#include "tasks/backend.h"

namespace gradmesh::sync {

/// The per-layer SFB state: this node's send buffers, the factors received, the stacking buffers.
///
/// Rounds: a peer may finish round t and send round t+1's factors before this node has all of
/// round t's (it had a faster path to the third node), never round t+2's (that needs this node's
/// round t+1 factors, sent only after this node finished round t). So factors are kept per round
/// parity, and this node's own send buffer is double-buffered: its round t bytes are rewritten in
/// round t+2, when every peer has provably received them.
///
/// Thread safety: store(), await() and fail_all() from any thread; pack() and rebuild() /
/// rebuild_on_device() from one task at a time (the layer's send and apply tasks, ordered by the
/// iteration graph); rebuild_on_device() from the thread that drives the device (the Model's).
class SfbLayer {
 public:
  /// A dense layer with M outputs and N inputs, K samples per node, `nodes` nodes, this is `rank`.
  /// `device`: the Model's backend when the layer is rebuilt on the device (rebuild_on_device;
  /// the stack is then pinned staging plus a device copy, nK (M + N) floats each), nullptr for
  /// the host (rebuild). `wire`: the segment format the factors cross the wire in (not owned; it
  /// outlives the layer: the registry's are process-wide), nullptr for floats.
  /// Throws DeviceError when the device is out of memory.
  SfbLayer(std::size_t m, std::size_t n, std::size_t k, std::size_t nodes, std::size_t rank,
           tasks::Backend* device = nullptr, const collective::SegmentCodec* wire = nullptr);

  /// Bytes of one node's factors: K (M + N) floats; with a segment format, U's segment (K M
  /// floats) then V's (K N): for fp16 and bf16 an f32 scale and K M u16, then the same for V.
  [[nodiscard]] std::size_t factor_bytes() const noexcept;

  /// Writes this node's U (K x M) and V (K x N) into round `round`'s send buffer (encoded for the
  /// wire), stores them as this node's factors of the round, and returns the buffer as a payload
  /// to broadcast (a view: valid until round + 2).
  net::Payload pack(std::uint64_t round, std::span<const float> u, std::span<const float> v);

  /// Stores `from`'s factors of `round` (kept, not copied). Returns false and says why in `why`
  /// for a wrong size, a round outside {current, current + 1} or a duplicate.
  [[nodiscard]] bool store(std::size_t from, std::uint64_t round, net::Payload factors,
                           std::string* why);

  /// Completes `done` once all n factors of `round` are stored; fails it with the error of
  /// fail_all() if that came first.
  void await(std::uint64_t round, engine::Completion done);

  /// Fails the waiting completion, and every later await(), with `error`.
  void fail_all(std::exception_ptr error);

  /// Stacks round `round`'s n factors in rank order and writes the mean gradient over the n nodes:
  /// dW (M x N) and db (M). Releases the round's payloads and opens round + 2's slots.
  void rebuild(std::uint64_t round, std::span<float> dw, std::span<float> db);

  /// rebuild() on the device given at construction: waits for the device (the previous round's
  /// upload may still read the staging stack), stacks the factors into the pinned staging stack,
  /// uploads it (nK (M + N) floats) and runs rebuild_dense_gradient on the device into dw (M x N)
  /// and db (M), device memory of that backend (Model::device_layer_gradients). Enqueued: returns
  /// before the device ran it. Throws ContractError when built without a device (and as
  /// rebuild()), DeviceError when a device call fails.
  void rebuild_on_device(std::uint64_t round, std::span<float> dw, std::span<float> db);

 private:
  struct Round {
    std::vector<net::Payload> factors;  // by rank
    std::size_t received = 0;
    collective::CompletionLatch done;  // the round's waiting task; the error of fail_all()
  };

  /// Checks that round `round` is complete and current, and stacks its n factors (decoded) into
  /// u_all_ and v_all_ in rank order. Returns the round for release().
  Round& stack(std::uint64_t round);
  /// Releases the round's payloads and opens round + 2's slots.
  void release(Round& r);

  std::size_t m_, n_, k_, nodes_, rank_;
  tasks::Backend* device_;                // null: rebuilt on the host
  const collective::SegmentCodec* wire_;  // null: floats
  std::mutex mutex_;
  std::uint64_t current_ = 0;                   // the oldest round not yet rebuilt
  std::array<Round, 2> rounds_;                 // by round parity
  std::array<std::vector<std::byte>, 2> send_;  // this node's encoded [U | V], by round parity
  tasks::Buffer<float> u_all_, v_all_;          // nK x M and nK x N, rank order (device: staging)
  tasks::Buffer<float> u_device_, v_device_;    // device copies of the stack; empty on the host
};

}  // namespace gradmesh::sync
