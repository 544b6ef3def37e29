#include "sync/collective/latch.h"

#include "engine/error.h"

namespace gradmesh::sync::collective {

void Settlement::run() && {
  if (!done_.valid()) return;
  const engine::Completion done = std::exchange(done_, engine::Completion{});
  if (error_) {
    done.fail(std::exchange(error_, nullptr));
  } else {
    done.complete();
  }
}

Settlement CompletionLatch::wait(engine::Completion done, bool ready) {
  if (error_) return {std::move(done), error_};
  if (ready) return {std::move(done), nullptr};
  GRADMESH_CHECK(!waiting_.valid(), "CompletionLatch::wait while a task waits already");
  waiting_ = std::move(done);
  return {};
}

Settlement CompletionLatch::release() {
  return {std::exchange(waiting_, engine::Completion{}), error_};
}

Settlement CompletionLatch::fail(std::exception_ptr error) {
  if (!error_) error_ = std::move(error);
  return {std::exchange(waiting_, engine::Completion{}), error_};
}

}  // namespace gradmesh::sync::collective
