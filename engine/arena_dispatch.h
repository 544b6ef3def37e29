#pragma once
// Handing a job to a oneTBB arena (internal to engine/).
//
// libtbb is not built with ThreadSanitizer, so TSan cannot see the synchronisation by which
// task_arena::enqueue passes a functor to a worker, and reports false races on the task object.
// The enqueue therefore lives in its own translation unit, compiled without TSan instrumentation
// in sanitizer builds (see engine/CMakeLists.txt), and the job is published with explicit
// release/acquire annotations, so TSan still checks everything the job itself touches.

#include <oneapi/tbb/task_arena.h>

#include "engine/executor.h"

namespace gradmesh::engine::detail {

/// Enqueues `job` on `arena`; a worker later calls Executor::run_job(job). Thread-safe.
void dispatch(tbb::task_arena& arena, Executor::Job* job);

/// Called first thing by the worker that runs `job` (the acquire matching dispatch's release).
void received(Executor::Job* job) noexcept;

}  // namespace gradmesh::engine::detail
