#include "tasks/cpu/onednn_support.h"

#include <string>

#include <oneapi/dnnl/dnnl_debug.h>

#include "tasks/cpu/blas.h"

namespace gradmesh::tasks::cpu {

dnnl::engine& onednn_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

void set_handle(dnnl::memory& m, const void* p) {
  // oneDNN takes a mutable pointer; the primitives only read their inputs.
  m.set_data_handle(const_cast<void*>(p));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
}

dnnl::memory OnednnSteps::input(const dnnl::memory& user, const dnnl::memory::desc& desc) {
  if (user.get_desc() == desc) return user;
  dnnl::memory m(desc, onednn_engine(), DNNL_MEMORY_NONE);
  add(dnnl::reorder(user, m), {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, m}});
  steps_.back().single_thread = desc.get_size() < kSmallReorder;
  return m;
}

dnnl::memory OnednnSteps::target(const dnnl::memory& user, const dnnl::memory::desc& desc) {
  if (user.get_desc() == desc) return user;
  return {desc, onednn_engine(), DNNL_MEMORY_NONE};
}

void OnednnSteps::output(const dnnl::memory& produced, const dnnl::memory& user) {
  if (produced.get() == user.get()) return;
  add(dnnl::reorder(produced, user), {{DNNL_ARG_FROM, produced}, {DNNL_ARG_TO, user}});
  steps_.back().single_thread = user.get_desc().get_size() < kSmallReorder;
}

void OnednnSteps::add(const dnnl::primitive& primitive,
                      const std::unordered_map<int, dnnl::memory>& args) {
  Step step{primitive, {}};
  for (const auto& [arg, memory] : args) step.args.push_back({arg, memory.get()});
  steps_.push_back(std::move(step));
}

void OnednnSteps::run(dnnl::stream& stream) const {
  const int team = blas_threads();
  for (const Step& step : steps_) {
    apply_onednn_team(step.single_thread ? 1 : team);
    const dnnl_status_t status = dnnl_primitive_execute(
        step.primitive.get(), stream.get(), static_cast<int>(step.args.size()), step.args.data());
    if (status != dnnl_success) {
      const auto kind = static_cast<dnnl_primitive_kind_t>(step.primitive.get_kind());
      throw DeviceError(std::string("oneDNN: running a ") + dnnl_prim_kind2str(kind) +
                        " primitive failed (status " + std::to_string(status) + ")");
    }
  }
  stream.wait();
  apply_onednn_team(team);
}

void OnednnBuffers::bind(Backend& backend, std::size_t slot,
                         std::initializer_list<dnnl::memory*> internal,
                         std::initializer_list<const dnnl::memory*> user) {
  if (slots_.size() <= slot) slots_.resize(slot + 1);
  Buffer<std::byte>& buffer = slots_[slot];
  auto u = user.begin();
  for (dnnl::memory* m : internal) {
    const dnnl::memory* mine = *u++;
    if (m->get() == mine->get()) continue;
    const std::size_t bytes = m->get_desc().get_size();
    if (buffer.size() < bytes) buffer = backend.allocate<std::byte>(bytes);
    m->set_data_handle(buffer.data());
  }
}

}  // namespace gradmesh::tasks::cpu
