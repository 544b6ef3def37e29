#pragma once
// A node's checkpoint writes (README "Checkpoints and resume"; Poseidon arXiv'15 sec. 4.4): the
// state is saved into one reused buffer at an iteration boundary (the iteration waits for this
// copy only), then written to disk in the background (temporary file, fsync, rename:
// CheckpointStore) beside the next iterations.

#include <cstddef>
#include <cstdint>
#include <future>
#include <vector>

#include "apps/recovery/checkpoint_file.h"

namespace gradmesh::app {

/// Writes a node's checkpoints, at most one in the background at a time.
///
/// Thread safety: none; one node's training thread calls it. The background write reads only the
/// buffer and the store, which the caller's thread leaves alone until finish(). Errors: save()
/// and finish() rethrow the previous write's CheckpointError (naming the path).
class CheckpointWriter {
 public:
  /// Seconds taken by one checkpoint's two halves.
  struct Saved {
    std::size_t bytes = 0;  ///< size of the encoded file
    double seconds = 0;     ///< the copy of the state (and any wait for the previous write)
    double previous_write_seconds = 0;  ///< the previous write's, finished by this save (or 0)
  };

  /// Writes into `store` with `header` (its iteration set at each save).
  CheckpointWriter(CheckpointStore store, CheckpointHeader header);
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;
  /// Waits for the write under way, if any (its error, if any, is dropped: call finish() first).
  ~CheckpointWriter();

  /// Finishes the previous write (its buffer is reused), encodes `sections` as the checkpoint of
  /// `iteration` and starts writing it in the background. Logs both.
  Saved save(std::uint64_t iteration, CheckpointSet& sections);
  /// Waits for the background write, if any: its seconds (0 when none was under way). Logs it.
  double finish();

  [[nodiscard]] const CheckpointStore& store() const noexcept { return store_; }

 private:
  CheckpointStore store_;
  CheckpointHeader header_;
  std::vector<std::byte> file_;  // reused by every save
  std::uint64_t writing_ = 0;    // the iteration being written
  std::future<double> write_;    // the write under way (its seconds), declared last
};

}  // namespace gradmesh::app
