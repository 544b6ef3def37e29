#pragma once
// The one completion/error latch of the sync layer: a deferred task (engine::Completion) waiting on
// a condition its owner tracks (a layer's KV chunks all back, n sufficient factors in, a ring's
// segments summed, a staleness bound holding), and the first error that fails it and every later
// wait instead (gloo's stored exception per pair, docs/errors.md: never thrown on the I/O thread,
// stored, every pending operation failed with it).

#include <exception>
#include <utility>

#include "engine/task.h"

namespace gradmesh::sync::collective {

/// What a latch decided, carried out after the owner's lock is released: complete the task, fail
/// it, or nothing. Completing a task schedules its successors, which may call back into the owner,
/// so it never happens under the owner's lock. Move-only; run() at most once.
class [[nodiscard]] Settlement {
 public:
  Settlement() = default;
  /// Completes the task, fails it with the error, or (no task) does nothing.
  void run() &&;
  /// Whether there is a task to complete or fail.
  [[nodiscard]] bool pending() const noexcept { return done_.valid(); }

 private:
  friend class CompletionLatch;
  Settlement(engine::Completion done, std::exception_ptr error) noexcept
      : done_(std::move(done)), error_(std::move(error)) {}
  engine::Completion done_;
  std::exception_ptr error_;
};

/// One waiting deferred task and the first error (first error wins).
///
/// Not locked: every member is called under the owner's lock (the one that guards the condition),
/// and the returned Settlement run() after releasing it. An owner with several waiting slots (one
/// a layer, one a round parity) keeps a latch a slot and fails each of them.
class CompletionLatch {
 public:
  /// `done` waits for release(): completes at once when `ready` (the condition holds), fails at
  /// once after fail(), else is parked. Throws ContractError when a task is parked already.
  [[nodiscard]] Settlement wait(engine::Completion done, bool ready);
  /// The condition now holds: the parked task, if any, completes (fails after fail()).
  [[nodiscard]] Settlement release();
  /// Stores `error` unless an error is stored; the parked task, and every later wait(), fail with
  /// the stored one.
  [[nodiscard]] Settlement fail(std::exception_ptr error);

  /// Whether a task is parked.
  [[nodiscard]] bool waiting() const noexcept { return waiting_.valid(); }
  /// Whether fail() was called.
  [[nodiscard]] bool failed() const noexcept { return error_ != nullptr; }
  /// The stored error (null before fail()).
  [[nodiscard]] const std::exception_ptr& error() const noexcept { return error_; }

 private:
  engine::Completion waiting_;
  std::exception_ptr error_;
};

}  // namespace gradmesh::sync::collective
