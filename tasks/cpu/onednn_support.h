#pragma once
// What tasks/cpu/'s oneDNN kernels share (built only with GRADMESH_HAVE_ONEDNN; internal): the
// CPU engine, chains of primitives bound once and run per call, and the buffers of their blocked
// memories.

#include <cstddef>
#include <initializer_list>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "tasks/backend.h"

namespace gradmesh::tasks::cpu {

/// The process's oneDNN CPU engine. Thread-safe (made once).
[[nodiscard]] dnnl::engine& onednn_engine();

/// oneDNN's format tag of an activation in `layout` (nchw, nChw8c, nChw16c).
[[nodiscard]] dnnl::memory::format_tag onednn_tag(Layout layout) noexcept;

/// Points `m` at `p` (nullptr is allowed: a memory the call does not use). Never allocates.
void set_handle(dnnl::memory& m, const void* p);

/// A chain of primitives run in order with arguments bound once (C API arrays: no allocation by
/// gradmesh per run). The memories bound must outlive the steps (the owner keeps them).
/// Thread safety: none.
class OnednnSteps {
 public:
  /// The memory a primitive should read `user` through: `user` itself when it is already in
  /// `desc`, else a new memory in desc (its handle bound by the owner) that a reorder from user
  /// fills, appended here.
  [[nodiscard]] dnnl::memory input(const dnnl::memory& user, const dnnl::memory::desc& desc);
  /// The memory a primitive should write for `user`: user itself when it is in `desc`, else a
  /// new memory in desc (handle bound by the owner); then call output() after the primitive.
  [[nodiscard]] static dnnl::memory target(const dnnl::memory& user,
                                           const dnnl::memory::desc& desc);
  /// Appends the reorder produced -> user when they are different memories.
  void output(const dnnl::memory& produced, const dnnl::memory& user);
  /// Appends `primitive` with its arguments.
  void add(const dnnl::primitive& primitive, const std::unordered_map<int, dnnl::memory>& args);
  /// Runs the steps in order on `stream`, on an OpenMP team of cpu::blas_threads() threads, but
  /// a reorder of fewer than kSmallReorder bytes on one thread (waking a team costs more than it
  /// saves there: a convolution's weights).
  /// Throws DeviceError naming the primitive's kind when oneDNN fails.
  void run(dnnl::stream& stream) const;
  /// The same inside an OpenMP parallel region whose threads each run their own steps (a batch
  /// slice's, primitives made for one thread): oneDNN then runs each primitive on the calling
  /// thread alone, and the team is left as it is.
  /// Throws DeviceError as run() does.
  void run_in_slice(dnnl::stream& stream) const;

 private:
  static constexpr std::size_t kSmallReorder = std::size_t{1} << 18;

  struct Step {
    dnnl::primitive primitive;
    std::vector<dnnl_exec_arg_t> args;
    bool single_thread = false;
    dnnl::memory scratchpad;  // a reorder's own, when it needs one (add_reorder)
  };
  /// Appends the reorder from -> to (user-mode scratchpad).
  void add_reorder(const dnnl::memory& from, const dnnl::memory& to);
  static void execute(const Step& step, dnnl::stream& stream);
  std::vector<Step> steps_;
};

/// A layer's primitives and bound memories by batch size (a `Plan`, with its `batch`): each
/// built the first time its size is met, the set-up's max_batch first. Thread safety: none.
template <class Plan>
class OnednnPlans {
 public:
  /// The plan of `batch` samples; `build(batch)` makes it when none is held yet.
  template <class Build>
  Plan& get(std::size_t batch, Build&& build) {
    for (Plan& p : plans_) {
      if (p.batch == batch) return p;
    }
    plans_.push_back(build(batch));
    return plans_.back();
  }
  /// Drops every plan (what they were built for changed) and builds the first size's again.
  template <class Build>
  void rebuild(Build&& build) {
    const std::size_t first = plans_.front().batch;
    plans_.clear();
    get(first, build);
  }

 private:
  std::vector<Plan> plans_;
};

/// Grow-only buffers, one a slot, holding the blocked copies of a layer's primitives
/// (backend-allocated, 64-byte aligned). Thread safety: none.
class OnednnBuffers {
 public:
  /// Points each `internal[i]` that is not the same memory as `user[i]` at slot `slot`'s buffer,
  /// growing it (an allocation) when one needs more than it holds.
  void bind(Backend& backend, std::size_t slot, std::initializer_list<dnnl::memory*> internal,
            std::initializer_list<const dnnl::memory*> user);

 private:
  std::vector<Buffer<std::byte>> slots_;
};

}  // namespace gradmesh::tasks::cpu
