#pragma once
// Per-layer countdown of the parts (KV chunks, SF pairs) still to arrive in a round, finishing the
// layer's waiting task when the last one lands. This is Poseidon's per-syncer completion vector C
// (ATC'17 sec. 4.1, "Managing Consistency"), kept per layer so that the next iteration's forward of
// layer l needs only layer l to be back.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>

#include "engine/task.h"
#include "sync/collective/latch.h"

namespace gradmesh::sync {

/// Thread safety: every member may be called from any thread (compute, network arena, loop).
class LayerArrivals {
 public:
  explicit LayerArrivals(std::size_t layers);

  /// Opens `round` for `layer`, expecting `parts` arrivals. Call before any part of the round can
  /// arrive (i.e. before sending this node's own contribution of the round).
  void expect(std::size_t layer, std::uint64_t round, std::size_t parts);
  /// Counts one arrival. Returns false (and counts nothing) when `round` is not the open round of
  /// `layer` or every expected part has already arrived: the caller rejects that message.
  [[nodiscard]] bool arrive(std::size_t layer, std::uint64_t round);
  /// Completes `done` once every part of `round` has arrived (at once if they already have);
  /// fails it at once, or later, with the error given to fail_all().
  void await(std::size_t layer, std::uint64_t round, engine::Completion done);
  /// Fails every waiting and future await() with `error` (e.g. a PeerError). First error wins.
  void fail_all(std::exception_ptr error);

 private:
  /// Whether fail_all() was called.
  [[nodiscard]] bool failed();

  struct Slot {
    std::mutex mutex;
    std::uint64_t round = 0;
    std::size_t remaining = 0;
    bool open = false;
    collective::CompletionLatch done;  // the layer's waiting task; the error of fail_all()
  };
  std::unique_ptr<Slot[]> slots_;
  std::size_t layers_;
  std::mutex error_mutex_;
  std::exception_ptr error_;  // the first error of fail_all(), given to every slot
};

}  // namespace gradmesh::sync
