#include "engine/arena_dispatch.h"

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* address);
extern "C" void __tsan_release(void* address);
#endif

namespace gradmesh::engine::detail {

namespace {
struct Trampoline {
  Executor::Job* job;
  void operator()() const { Executor::run_job(job); }
};
}  // namespace

void dispatch(tbb::task_arena& arena, Executor::Job* job) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(job);
#endif
  arena.enqueue(Trampoline{job});
}

void received([[maybe_unused]] Executor::Job* job) noexcept {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(job);
#endif
}

}  // namespace gradmesh::engine::detail
