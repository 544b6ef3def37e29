#include "tasks/cpu/onednn_support.h"

#include <string>
#include <utility>

#include <oneapi/dnnl/dnnl_debug.h>

#include "tasks/cpu/blas.h"
#include "tasks/cpu/cpu_backend.h"

namespace gradmesh::tasks::cpu {

dnnl::engine& onednn_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::memory::format_tag onednn_tag(Layout layout) noexcept {
  switch (layout) {
    case Layout::kBlocked8:
      return dnnl::memory::format_tag::nChw8c;
    case Layout::kBlocked16:
      return dnnl::memory::format_tag::nChw16c;
    case Layout::kNchw:
      break;
  }
  return dnnl::memory::format_tag::nchw;
}

namespace {

/// The probe of preferred_blocked_layout() and onednn_kernel_names(): a ResNet's 16-channel 3x3
/// convolution at 28x28, batch 64, its activations in `tag` (any: oneDNN's choice). Throws
/// dnnl::error where oneDNN has no primitive for it.
const dnnl::memory::dims kProbeData{64, 16, 28, 28};

dnnl::convolution_forward::primitive_desc probe_convolution(dnnl::memory::format_tag tag) {
  using dnnl::memory;
  const memory::desc data(kProbeData, memory::data_type::f32, tag);
  const memory::dims weights{16, 16, 3, 3}, strides{1, 1}, pad{1, 1};
  return {dnnl::convolution_forward::desc(
              dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, data,
              memory::desc(weights, memory::data_type::f32, memory::format_tag::any), data, strides,
              pad, pad),
          onednn_engine()};
}

}  // namespace

Layout preferred_blocked_layout() noexcept {
  static const Layout preferred = [] {
    using dnnl::memory;
    try {
      const auto pd = probe_convolution(memory::format_tag::any);
      for (const Layout l : {Layout::kBlocked16, Layout::kBlocked8}) {
        if (pd.dst_desc() == memory::desc(kProbeData, memory::data_type::f32, onednn_tag(l))) {
          return l;
        }
      }
    } catch (const dnnl::error&) {  // no primitive for it: no blocked layout
    }
    return Layout::kNchw;
  }();
  return preferred;
}

std::string onednn_kernel_names() {
  using dnnl::memory;
  const Layout layout = preferred_blocked_layout();
  try {
    const auto convolution = probe_convolution(onednn_tag(layout));
    const dnnl::batch_normalization_forward::primitive_desc batch_norm(
        dnnl::batch_normalization_forward::desc(
            dnnl::prop_kind::forward_training,
            memory::desc(kProbeData, memory::data_type::f32, onednn_tag(layout)), 1e-5f,
            dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift),
        onednn_engine());
    const char* tag = layout == Layout::kBlocked16  ? "nChw16c"
                      : layout == Layout::kBlocked8 ? "nChw8c"
                                                    : "NCHW";
    return std::string("convolutions ") + convolution.impl_info_str() + " and batch norms " +
           batch_norm.impl_info_str() + " on " + tag;
  } catch (const dnnl::error& e) {
    return std::string("no oneDNN convolution on this CPU: ") + e.what();
  }
}

void set_handle(dnnl::memory& m, const void* p) {
  // oneDNN takes a mutable pointer; the primitives only read their inputs.
  m.set_data_handle(const_cast<void*>(p));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
}

dnnl::memory OnednnSteps::input(const dnnl::memory& user, const dnnl::memory::desc& desc) {
  if (user.get_desc() == desc) return user;
  dnnl::memory m(desc, onednn_engine(), DNNL_MEMORY_NONE);
  add_reorder(user, m);
  steps_.back().single_thread = desc.get_size() < kSmallReorder;
  return m;
}

dnnl::memory OnednnSteps::target(const dnnl::memory& user, const dnnl::memory::desc& desc) {
  if (user.get_desc() == desc) return user;
  return {desc, onednn_engine(), DNNL_MEMORY_NONE};
}

void OnednnSteps::output(const dnnl::memory& produced, const dnnl::memory& user) {
  if (produced.get() == user.get()) return;
  add_reorder(produced, user);
  steps_.back().single_thread = user.get_desc().get_size() < kSmallReorder;
}

void OnednnSteps::add_reorder(const dnnl::memory& from, const dnnl::memory& to) {
  // User-mode scratchpad, as the convolutions' (a step may run on another thread than the one
  // that made it); f32 reorders between plain and blocked layouts need none, but one that does
  // gets its own, allocated here once.
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::reorder::primitive_desc pd(from, to, attr);
  const dnnl::memory::desc scratchpad = pd.scratchpad_desc();
  if (scratchpad.get_size() == 0) {
    add(dnnl::reorder(pd), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
    return;
  }
  dnnl::memory owned(scratchpad, onednn_engine());
  add(dnnl::reorder(pd), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}, {DNNL_ARG_SCRATCHPAD, owned}});
  steps_.back().scratchpad = std::move(owned);
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
    execute(step, stream);
  }
  stream.wait();
  apply_onednn_team(team);
}

void OnednnSteps::run_in_slice(dnnl::stream& stream) const {
  for (const Step& step : steps_) execute(step, stream);
  stream.wait();
}

void OnednnSteps::execute(const Step& step, dnnl::stream& stream) {
  const dnnl_status_t status = dnnl_primitive_execute(
      step.primitive.get(), stream.get(), static_cast<int>(step.args.size()), step.args.data());
  if (status != dnnl_success) {
    const auto kind = static_cast<dnnl_primitive_kind_t>(step.primitive.get_kind());
    throw DeviceError(std::string("oneDNN: running a ") + dnnl_prim_kind2str(kind) +
                      " primitive failed (status " + std::to_string(status) + ")");
  }
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
