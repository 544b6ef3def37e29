#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include "engine/error.h"
#include "tasks/cpu/blas.h"
#include "tasks/cpu/cpu_backend.h"
#include "tasks/cpu/parallel.h"

// The CPU backend's threads (set_threads): the kernels' oneTBB arena, a layer's chunks side by
// side (CpuBackend::run_chunks), OpenBLAS's thread count while they run (SingleBlasThread) and
// whether oneDNN's convolutions split a call into batch slices (set_convolution_slices).

namespace gradmesh::tasks::cpu {
namespace {

/// The arena the kernels' parallel loops run in (set_threads); null while they run inline. Every
/// arena made stays alive until exit (one per distinct count), so a loop under way finishes on its
/// own arena whatever another thread sets meanwhile.
std::atomic<tbb::task_arena*> kernel_arena{nullptr};
std::atomic<int> kernel_threads{1};  // set_threads' n
std::mutex kernel_arenas_mutex;
std::vector<std::pair<int, std::unique_ptr<tbb::task_arena>>> kernel_arenas;

/// Whether this thread is inside a run_chunks body: the kernels' loops then run inline (the
/// chunks already occupy the arena's threads; a thread waiting in a nested loop could also take
/// another chunk and reuse its slot).
thread_local bool inside_chunk = false;

/// SingleBlasThread holders in the process (every run_chunks under way, any Model's): OpenBLAS
/// runs one thread while it is > 0, so a body's GEMM stays on the body's thread. Guarded by
/// chunk_blas_mutex.
int chunk_runs = 0;
std::mutex chunk_blas_mutex;

/// Calls f when the scope ends, an exception's unwinding included (run_chunks' restores).
template <class F>
class AtExit {
 public:
  explicit AtExit(F f) : f_(std::move(f)) {}
  AtExit(const AtExit&) = delete;
  AtExit& operator=(const AtExit&) = delete;
  ~AtExit() { f_(); }

 private:
  F f_;
};

}  // namespace

std::size_t CpuBackend::chunk_slots() const noexcept { return static_cast<std::size_t>(threads()); }

void CpuBackend::run_chunks(std::size_t items, std::size_t slots, ChunkBody body) {
  tbb::task_arena* arena = items < 2 || slots < 2 || inside_chunk
                               ? nullptr
                               : kernel_arena.load(std::memory_order_acquire);
  if (arena == nullptr) {
    for (std::size_t item = 0; item < items; ++item) body(item, 0);
    return;
  }
  const SingleBlasThread one_blas_thread;
  // One worker per slot, each taking the next item until none is left: every item once, a slot
  // never shared, and the items spread over however many threads pick the workers up.
  const std::size_t workers =
      std::min({items, slots, static_cast<std::size_t>(arena->max_concurrency())});
  std::atomic<std::size_t> next{0};
  arena->execute([&] {
    tbb::parallel_for(
        tbb::blocked_range<std::size_t>(0, workers, 1),
        [&](const tbb::blocked_range<std::size_t>& r) {
          inside_chunk = true;
          const AtExit leave([] { inside_chunk = false; });
          for (std::size_t slot = r.begin(); slot < r.end(); ++slot) {
            for (std::size_t item = next++; item < items; item = next++) body(item, slot);
          }
        },
        tbb::simple_partitioner());
  });
}

tbb::task_arena* loop_arena() noexcept {
  return inside_chunk ? nullptr : kernel_arena.load(std::memory_order_acquire);
}

void set_threads(int n) {
  if (n < 1) throw ConfigError("compute threads: expected >= 1, got " + std::to_string(n));
  {
    // A run_chunks under way restores OpenBLAS to the new n when it ends.
    const std::scoped_lock lock(chunk_blas_mutex);
    kernel_threads.store(n, std::memory_order_relaxed);
    if (chunk_runs == 0) set_blas_threads(n);
  }
  if (n == 1) {
    kernel_arena.store(nullptr, std::memory_order_release);
    return;
  }
  const std::scoped_lock lock(kernel_arenas_mutex);
  auto it = std::find_if(kernel_arenas.begin(), kernel_arenas.end(),
                         [n](const auto& arena) { return arena.first == n; });
  if (it == kernel_arenas.end()) {
    kernel_arenas.emplace_back(n, std::make_unique<tbb::task_arena>(n));
    it = std::prev(kernel_arenas.end());
  }
  kernel_arena.store(it->second.get(), std::memory_order_release);
}

int threads() noexcept { return kernel_threads.load(std::memory_order_relaxed); }

namespace {
std::atomic<bool> slices_on{[] {
  const char* e = std::getenv("GRADMESH_CONV_SLICES");
  return e == nullptr || std::string(e) != "0";
}()};
}  // namespace

void set_convolution_slices(bool on) noexcept { slices_on.store(on, std::memory_order_relaxed); }

bool convolution_slices() noexcept { return slices_on.load(std::memory_order_relaxed); }

SingleBlasThread::SingleBlasThread() {
  const std::scoped_lock lock(chunk_blas_mutex);
  if (chunk_runs++ == 0) set_blas_threads(1);
}

SingleBlasThread::~SingleBlasThread() {
  const std::scoped_lock lock(chunk_blas_mutex);
  if (--chunk_runs == 0) set_blas_threads(kernel_threads.load(std::memory_order_relaxed));
}

}  // namespace gradmesh::tasks::cpu
