#include "tasks/cpu/onednn_convolution.h"

#include <algorithm>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "tasks/cpu/blas.h"
#include "tasks/cpu/cpu_backend.h"
#include "tasks/cpu/onednn_support.h"

namespace gradmesh::tasks::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Type = memory::data_type;

/// The primitives and bound memories of one batch size.
struct Plan {
  std::size_t batch = 0;
  // The layer's own memory (activations in the Model's layouts, NCHW, nChw8c or nChw16c; F C k k
  // weights; F biases): handles set per call.
  memory user_x, user_y, user_dy, user_dx, user_w, user_dw, user_b, user_db;
  // What the primitives read and write: the user's memory where oneDNN takes its layout, else a
  // blocked copy in the kernels' buffers (handles set per call, as the buffers may have grown).
  memory x, y, dy, dx, w_forward, w_backward, dw;
  memory dy_data;  // dy as backward data reads it: dy, unless it wants another layout
  // The three convolutions' scratchpad (user mode, in the kernels' buffers: a primitive may run
  // on another thread than it was made on): the largest one's desc, shared as they run in turn.
  memory scratchpad;
  memory x_weights;  // x as backward weights reads it: forward's x, unless it wants another
  OnednnSteps forward, backward_in, backward_weights, backward_data;
};

class OnednnConvolution final : public ConvolutionKernels {
 public:
  OnednnConvolution(Backend& backend, const Im2colGeometry& g, std::size_t filters,
                    std::size_t max_batch)
      : backend_(backend),
        g_(g),
        filters_(filters),
        stream_(onednn_engine()),
        x_sample_(g.channels * g.height * g.width),
        y_sample_(filters * g.out_height * g.out_width) {
    plan_for(max_batch);
  }

  void forward(const float* x, const float* w, const float* b, float* y,
               std::size_t batch) override {
    if (const int n = slice_count(batch); n > 1) {
      prepare_slices(n, batch);
      for (int t = 0; t < n; ++t) {
        const std::size_t first = slice_begin(batch, n, t);
        bind(*active_[t], slices_[t].buffers, x + first * x_sample_, w, b, y + first * y_sample_,
             nullptr, nullptr, nullptr, nullptr);
      }
      run_slices(n, [this](int t) { active_[t]->forward.run_in_slice(slices_[t].stream); });
      return;
    }
    Plan& p = plan_for(batch);
    bind(p, buffers_, x, w, b, y, nullptr, nullptr, nullptr, nullptr);
    p.forward.run(stream_);
  }

  void set_layouts(Layout input, Layout output) override {
    if (input == input_ && output == output_) return;
    input_ = input;
    output_ = output;
    plans_.rebuild([this](std::size_t b) { return build(b, blas_threads()); });
    slices_.clear();
  }

  void backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                std::size_t batch) override {
    if (dx == nullptr && dw == nullptr) return;
    if (const int n = slice_count(batch); n > 1) {
      backward_sliced(n, x, w, dy, dx, dw, db, batch);
      return;
    }
    Plan& p = plan_for(batch);
    bind(p, buffers_, x, w, nullptr, nullptr, dy, dx, dw, db);
    p.backward_in.run(stream_);
    if (dw != nullptr) p.backward_weights.run(stream_);
    if (dx != nullptr) p.backward_data.run(stream_);
  }

 private:
  /// One batch slice's primitives (made for one thread: run_in_slice), buffers and stream.
  struct Slice {
    OnednnPlans<Plan> plans;
    OnednnBuffers buffers;
    dnnl::stream stream{onednn_engine()};
    Buffer<float> dw, db;  // a later slice's share of the weights' and the bias' gradients
  };

  /// The plan of `batch` samples, built the first time that size is met.
  Plan& plan_for(std::size_t batch) {
    return plans_.get(batch, [this](std::size_t b) { return build(b, blas_threads()); });
  }

  /// How many batch slices a call of `batch` samples runs as: the team's size, when the team has
  /// more than one thread, each slice gets at least 2 samples and cpu::convolution_slices() is
  /// on; else 1 (one primitive on the whole team).
  static int slice_count(std::size_t batch) {
    const int team = blas_threads();
    return convolution_slices() && team > 1 && batch >= 2 * static_cast<std::size_t>(team) ? team
                                                                                           : 1;
  }

  /// Slice t of n's first sample (slice t holds [slice_begin(t), slice_begin(t + 1))).
  static std::size_t slice_begin(std::size_t batch, int n, int t) {
    return batch * static_cast<std::size_t>(t) / static_cast<std::size_t>(n);
  }

  /// Points active_[t] at slice t's plan for its size, building it (for a team of one) the first
  /// time; serially, before the slices run.
  void prepare_slices(int n, std::size_t batch) {
    if (slices_.size() < static_cast<std::size_t>(n)) slices_.resize(static_cast<std::size_t>(n));
    active_.resize(static_cast<std::size_t>(n));
    for (int t = 0; t < n; ++t) {
      const std::size_t size = slice_begin(batch, n, t + 1) - slice_begin(batch, n, t);
      active_[t] = &slices_[t].plans.get(size, [this](std::size_t b) { return build(b, 1); });
    }
    apply_onednn_threads();
  }

  /// body(t) for t < n on an OpenMP team of n, each thread's nested team of one (each thread
  /// takes the slices t = its number, + the team's size, ...: every slice once, should the
  /// runtime give fewer threads). The first exception thrown is rethrown after the team ends.
  template <class Body>
  void run_slices(int n, Body body) {
    errors_.assign(static_cast<std::size_t>(n), nullptr);
#pragma omp parallel num_threads(n)
    {
      // Each thread's team inside the region: one (a GEMM inside a primitive, gemm:jit's, would
      // else split its work for the outer team's size; the region's ICVs end with it).
      omp_set_num_threads(1);
      for (int t = omp_get_thread_num(); t < n; t += omp_get_num_threads()) {
        try {
          body(t);
        } catch (...) {
          errors_[t] = std::current_exception();
        }
      }
    }
    for (const std::exception_ptr& e : errors_) {
      if (e) std::rethrow_exception(e);
    }
  }

  /// backward() over n batch slices side by side: dx by slice; the weights' and the bias'
  /// gradients by slice, then added in slice order (the same bits from run to run).
  void backward_sliced(int n, const float* x, const float* w, const float* dy, float* dx, float* dw,
                       float* db, std::size_t batch) {
    prepare_slices(n, batch);
    const std::size_t weights = filters_ * g_.channels * g_.kernel * g_.kernel;
    for (int t = 0; t < n; ++t) {
      Slice& slice = slices_[t];
      if (t > 0 && dw != nullptr && slice.dw.size() < weights) {
        slice.dw = backend_.allocate<float>(weights);
        slice.db = backend_.allocate<float>(filters_);
      }
      const std::size_t first = slice_begin(batch, n, t);
      bind(*active_[t], slice.buffers, x + first * x_sample_, w, nullptr, nullptr,
           dy + first * y_sample_, dx == nullptr ? nullptr : dx + first * x_sample_,
           dw == nullptr ? nullptr : (t == 0 ? dw : slice.dw.data()),
           db == nullptr || dw == nullptr ? nullptr : (t == 0 ? db : slice.db.data()));
    }
    run_slices(n, [&](int t) {
      const Plan& p = *active_[t];
      dnnl::stream& stream = slices_[t].stream;
      p.backward_in.run_in_slice(stream);
      if (dw != nullptr) p.backward_weights.run_in_slice(stream);
      if (dx != nullptr) p.backward_data.run_in_slice(stream);
    });
    if (dw == nullptr) return;
    for (int t = 1; t < n; ++t) {
      backend_.accumulate(dw, slices_[t].dw.data(), weights);
      if (db != nullptr) backend_.accumulate(db, slices_[t].db.data(), filters_);
    }
  }

  Plan build(std::size_t batch, int team) {
    const auto n = static_cast<memory::dim>(batch);
    const auto c = static_cast<memory::dim>(g_.channels);
    const auto f = static_cast<memory::dim>(filters_);
    const auto k = static_cast<memory::dim>(g_.kernel);
    const memory::dims src{n, c, static_cast<memory::dim>(g_.height),
                           static_cast<memory::dim>(g_.width)};
    const memory::dims dst{n, f, static_cast<memory::dim>(g_.out_height),
                           static_cast<memory::dim>(g_.out_width)};
    const memory::dims weights{f, c, k, k};
    const memory::dims bias{f};
    const memory::dims strides{static_cast<memory::dim>(g_.stride),
                               static_cast<memory::dim>(g_.stride)};
    const memory::dims padding{static_cast<memory::dim>(g_.padding),
                               static_cast<memory::dim>(g_.padding)};
    const memory::desc any_src(src, Type::f32, Tag::any), any_dst(dst, Type::f32, Tag::any),
        any_weights(weights, Type::f32, Tag::any), bias_desc(bias, Type::f32, Tag::x);
    const memory::desc user_src(src, Type::f32, onednn_tag(input_)),
        user_dst(dst, Type::f32, onednn_tag(output_)), user_weights(weights, Type::f32, Tag::oihw);
    dnnl::engine& engine = onednn_engine();

    // oneDNN splits a primitive's work by the OpenMP team it sees when the primitive is made:
    // make it for the team it will run on (else the weights' gradient sums in another order).
    apply_onednn_team(team);
    Plan p;
    p.batch = batch;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    try {
      const dnnl::convolution_forward::primitive_desc fpd(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                          dnnl::algorithm::convolution_direct, any_src, any_weights,
                                          bias_desc, any_dst, strides, padding, padding),
          attr, engine);
      const dnnl::convolution_backward_data::primitive_desc dpd(
          dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, any_src,
                                                any_weights, any_dst, strides, padding, padding),
          attr, engine, fpd);
      const dnnl::convolution_backward_weights::primitive_desc wpd(
          dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, any_src,
                                                   any_weights, bias_desc, any_dst, strides,
                                                   padding, padding),
          attr, engine, fpd);
      memory::desc scratchpad = fpd.scratchpad_desc();
      for (const memory::desc& d : {dpd.scratchpad_desc(), wpd.scratchpad_desc()}) {
        if (d.get_size() > scratchpad.get_size()) scratchpad = d;
      }
      p.scratchpad = memory(scratchpad, engine, DNNL_MEMORY_NONE);

      p.user_x = memory(user_src, engine, DNNL_MEMORY_NONE);
      p.user_dx = memory(user_src, engine, DNNL_MEMORY_NONE);
      p.user_y = memory(user_dst, engine, DNNL_MEMORY_NONE);
      p.user_dy = memory(user_dst, engine, DNNL_MEMORY_NONE);
      p.user_w = memory(user_weights, engine, DNNL_MEMORY_NONE);
      p.user_dw = memory(user_weights, engine, DNNL_MEMORY_NONE);
      p.user_b = memory(bias_desc, engine, DNNL_MEMORY_NONE);
      p.user_db = memory(bias_desc, engine, DNNL_MEMORY_NONE);

      // Forward: [x in] [w in] convolution [y out].
      p.x = p.forward.input(p.user_x, fpd.src_desc());
      p.w_forward = p.forward.input(p.user_w, fpd.weights_desc());
      p.y = OnednnSteps::target(p.user_y, fpd.dst_desc());
      p.forward.add(dnnl::convolution_forward(fpd), {{DNNL_ARG_SRC, p.x},
                                                     {DNNL_ARG_WEIGHTS, p.w_forward},
                                                     {DNNL_ARG_BIAS, p.user_b},
                                                     {DNNL_ARG_DST, p.y},
                                                     {DNNL_ARG_SCRATCHPAD, p.scratchpad}});
      p.forward.output(p.y, p.user_y);

      // Backward: [dy in], then weights' [dw out] and data's [w in] [dx out].
      p.dy = p.backward_in.input(p.user_dy, wpd.diff_dst_desc());
      p.dw = OnednnSteps::target(p.user_dw, wpd.diff_weights_desc());
      p.dy_data = p.dy;
      if (dpd.diff_dst_desc() != wpd.diff_dst_desc()) {
        p.dy_data = p.backward_data.input(p.user_dy, dpd.diff_dst_desc());
      }
      // Backward weights may want x in another layout than forward read it in (a few input
      // channels: forward reads NCHW, backward weights a blocked copy).
      p.x_weights = wpd.src_desc() == p.x.get_desc()
                        ? p.x
                        : p.backward_weights.input(p.user_x, wpd.src_desc());
      p.backward_weights.add(dnnl::convolution_backward_weights(wpd),
                             {{DNNL_ARG_SRC, p.x_weights},
                              {DNNL_ARG_DIFF_DST, p.dy},
                              {DNNL_ARG_DIFF_WEIGHTS, p.dw},
                              {DNNL_ARG_DIFF_BIAS, p.user_db},
                              {DNNL_ARG_SCRATCHPAD, p.scratchpad}});
      p.backward_weights.output(p.dw, p.user_dw);
      p.w_backward = dpd.weights_desc() == fpd.weights_desc()
                         ? p.w_forward
                         : p.backward_data.input(p.user_w, dpd.weights_desc());
      p.dx = OnednnSteps::target(p.user_dx, dpd.diff_src_desc());
      p.backward_data.add(dnnl::convolution_backward_data(dpd),
                          {{DNNL_ARG_DIFF_DST, p.dy_data},
                           {DNNL_ARG_WEIGHTS, p.w_backward},
                           {DNNL_ARG_DIFF_SRC, p.dx},
                           {DNNL_ARG_SCRATCHPAD, p.scratchpad}});
      p.backward_data.output(p.dx, p.user_dx);
    } catch (const dnnl::error& e) {
      throw DeviceError("oneDNN convolution (" + std::to_string(g_.channels) + "x" +
                        std::to_string(g_.height) + "x" + std::to_string(g_.width) + " to " +
                        std::to_string(filters_) + " filters of " + std::to_string(g_.kernel) +
                        "x" + std::to_string(g_.kernel) + ", stride " + std::to_string(g_.stride) +
                        ", padding " + std::to_string(g_.padding) + ", batch " +
                        std::to_string(batch) + "): " + e.what());
    }
    return p;
  }

  /// Points the plan's memories at the call's pointers and at the blocked buffers (grown here if
  /// this plan needs more than the last; never after the first call of each batch size).
  void bind(Plan& p, OnednnBuffers& buffers, const float* x, const float* w, const float* b,
            float* y, const float* dy, float* dx, float* dw, float* db) {
    set_handle(p.user_x, x);
    set_handle(p.user_w, w);
    set_handle(p.user_b, b);
    set_handle(p.user_y, y);
    set_handle(p.user_dy, dy);
    set_handle(p.user_dx, dx);
    set_handle(p.user_dw, dw);
    set_handle(p.user_db, db);
    // The blocked input lives from forward to backward; its buffer then takes the blocked dx
    // (the weights' gradient, which reads it, runs first).
    buffers.bind(backend_, 0, {&p.x, &p.dx}, {&p.user_x, &p.user_dx});
    buffers.bind(backend_, 1, {&p.y, &p.dy}, {&p.user_y, &p.user_dy});
    buffers.bind(backend_, 2, {&p.w_forward}, {&p.user_w});
    if (p.w_backward.get() != p.w_forward.get()) {
      buffers.bind(backend_, 3, {&p.w_backward}, {&p.user_w});
    }
    buffers.bind(backend_, 4, {&p.dw}, {&p.user_dw});
    if (p.dy_data.get() != p.dy.get()) buffers.bind(backend_, 5, {&p.dy_data}, {&p.user_dy});
    if (p.x_weights.get() != p.x.get()) buffers.bind(backend_, 6, {&p.x_weights}, {&p.user_x});
    if (p.scratchpad.get_desc().get_size() > 0) {
      buffers.bind(backend_, 7, {&p.scratchpad}, {&p.user_b});
    }
  }

  Backend& backend_;
  Im2colGeometry g_;
  std::size_t filters_;
  Layout input_ = Layout::kNchw, output_ = Layout::kNchw;
  dnnl::stream stream_;
  OnednnPlans<Plan> plans_;
  OnednnBuffers buffers_;
  // Floats of one sample of x and of y in any layout (a blocked one is taken only by channel
  // counts that are multiples of its block: Layout).
  const std::size_t x_sample_, y_sample_;
  std::vector<Slice> slices_;
  std::vector<Plan*> active_;  // each slice's plan for this call (prepare_slices)
  std::vector<std::exception_ptr> errors_;
};

}  // namespace

std::unique_ptr<ConvolutionKernels> make_onednn_convolution(Backend& backend,
                                                            const Im2colGeometry& g,
                                                            std::size_t filters,
                                                            std::size_t max_batch) {
  return std::make_unique<OnednnConvolution>(backend, g, filters, max_batch);
}

}  // namespace gradmesh::tasks::cpu
