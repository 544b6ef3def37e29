#include "tasks/cpu/onednn_batch_norm.h"

#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "tasks/cpu/blas.h"
#include "tasks/cpu/onednn_support.h"

namespace gradmesh::tasks::cpu {
namespace {

using dnnl::memory;
using Flags = dnnl::normalization_flags;

/// The primitives and bound memories of one batch size.
struct Plan {
  std::size_t batch = 0;
  memory x, y, dy, dx, mean, var, gamma, beta, dgamma, dbeta, workspace;
  OnednnSteps training, inference, backward;
};

class OnednnBatchNorm final : public BatchNormKernels {
 public:
  OnednnBatchNorm(Backend& backend, std::size_t channels, std::size_t spatial,
                  std::size_t max_batch, float eps)
      : backend_(backend),
        channels_(channels),
        spatial_(spatial),
        eps_(eps),
        stream_(onednn_engine()) {
    plan_for(max_batch);
  }

  void forward_training(const float* x, const float* gamma, const float* beta, float* y,
                        float* mean, float* var, std::size_t batch) override {
    Plan& p = plan_for(batch);
    bind(p, x, y, nullptr, nullptr, mean, var, gamma, beta, nullptr, nullptr);
    p.training.run(stream_);
  }

  void forward_inference(const float* x, const float* mean, const float* var, const float* gamma,
                         const float* beta, float* y, std::size_t batch) override {
    Plan& p = plan_for(batch);
    bind(p, x, y, nullptr, nullptr, mean, var, gamma, beta, nullptr, nullptr);
    p.inference.run(stream_);
  }

  void backward(const float* x, const float* dy, const float* mean, const float* var,
                const float* gamma, const float* beta, float* dx, float* dgamma, float* dbeta,
                std::size_t batch) override {
    Plan& p = plan_for(batch);
    bind(p, x, nullptr, dy, dx, mean, var, gamma, beta, dgamma, dbeta);
    p.backward.run(stream_);
  }

  void set_layout(Layout layout) override {
    if (layout == layout_) return;
    layout_ = layout;
    plans_.rebuild([this](std::size_t b) { return build(b); });
  }

  void set_relu(bool relu) override {
    if (relu == relu_) return;
    relu_ = relu;
    plans_.rebuild([this](std::size_t b) { return build(b); });
  }

 private:
  Plan& plan_for(std::size_t batch) {
    return plans_.get(batch, [this](std::size_t b) { return build(b); });
  }

  Plan build(std::size_t batch) {
    // batch x C x S x 1: nChw16c, nChw8c and NCHW place pixel p = h W + w the same for any H, W.
    const memory::dims dims{static_cast<memory::dim>(batch), static_cast<memory::dim>(channels_),
                            static_cast<memory::dim>(spatial_), 1};
    const memory::desc data(dims, memory::data_type::f32, onednn_tag(layout_));
    const memory::desc vector({static_cast<memory::dim>(channels_)}, memory::data_type::f32,
                              memory::format_tag::x);
    dnnl::engine& engine = onednn_engine();
    Flags flags = Flags::use_scale | Flags::use_shift;
    if (relu_) flags = flags | Flags::fuse_norm_relu;
    // Made for the team they run on (cpu::apply_onednn_threads), as the convolutions are.
    apply_onednn_threads();
    Plan p;
    p.batch = batch;
    try {
      const dnnl::batch_normalization_forward::primitive_desc tpd(
          dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, data, eps_,
                                                  flags),
          engine);
      const dnnl::batch_normalization_forward::primitive_desc ipd(
          dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_inference, data, eps_,
                                                  flags | Flags::use_global_stats),
          engine);
      const dnnl::batch_normalization_backward::primitive_desc bpd(
          dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, data, data, eps_,
                                                   flags),
          engine, tpd);
      for (memory* m : {&p.x, &p.y, &p.dy, &p.dx}) *m = memory(data, engine, DNNL_MEMORY_NONE);
      for (memory* m : {&p.mean, &p.var, &p.gamma, &p.beta, &p.dgamma, &p.dbeta}) {
        *m = memory(vector, engine, DNNL_MEMORY_NONE);
      }
      std::unordered_map<int, memory> common{{DNNL_ARG_SRC, p.x},
                                             {DNNL_ARG_MEAN, p.mean},
                                             {DNNL_ARG_VARIANCE, p.var},
                                             {DNNL_ARG_SCALE, p.gamma},
                                             {DNNL_ARG_SHIFT, p.beta}};
      if (relu_) {
        p.workspace = memory(tpd.workspace_desc(), engine, DNNL_MEMORY_NONE);
        common[DNNL_ARG_WORKSPACE] = p.workspace;
      }
      std::unordered_map<int, memory> forward = common;
      forward[DNNL_ARG_DST] = p.y;
      p.training.add(dnnl::batch_normalization_forward(tpd), forward);
      forward.erase(DNNL_ARG_WORKSPACE);  // inference keeps no mask
      p.inference.add(dnnl::batch_normalization_forward(ipd), forward);
      std::unordered_map<int, memory> backward = common;
      backward[DNNL_ARG_DIFF_DST] = p.dy;
      backward[DNNL_ARG_DIFF_SRC] = p.dx;
      backward[DNNL_ARG_DIFF_SCALE] = p.dgamma;
      backward[DNNL_ARG_DIFF_SHIFT] = p.dbeta;
      p.backward.add(dnnl::batch_normalization_backward(bpd), backward);
    } catch (const dnnl::error& e) {
      throw DeviceError("oneDNN batch normalization (" + std::to_string(channels_) +
                        " channels of " + std::to_string(spatial_) + " positions, batch " +
                        std::to_string(batch) + (relu_ ? ", with its ReLU" : "") +
                        "): " + e.what());
    }
    return p;
  }

  /// Points the plan's memories at the call's pointers, the workspace and (dx == nullptr) the
  /// input gradient's scratch at their grow-once buffers.
  void bind(Plan& p, const float* x, float* y, const float* dy, float* dx, const float* mean,
            const float* var, const float* gamma, const float* beta, float* dgamma, float* dbeta) {
    set_handle(p.x, x);
    set_handle(p.y, y);
    set_handle(p.dy, dy);
    set_handle(p.mean, mean);
    set_handle(p.var, var);
    set_handle(p.gamma, gamma);
    set_handle(p.beta, beta);
    set_handle(p.dgamma, dgamma);
    set_handle(p.dbeta, dbeta);
    if (relu_) grow(workspace_, p.workspace.get_desc().get_size(), p.workspace);
    if (dx != nullptr) {
      set_handle(p.dx, dx);
    } else if (dgamma != nullptr) {  // a backward whose input gradient nobody takes
      grow(unused_dx_, p.dx.get_desc().get_size(), p.dx);
    }
  }

  /// Points `m` at `buffer`, first grown to `bytes` when it holds fewer (once per batch size).
  void grow(Buffer<std::byte>& buffer, std::size_t bytes, memory& m) {
    if (buffer.size() < bytes) buffer = backend_.allocate<std::byte>(bytes);
    m.set_data_handle(buffer.data());
  }

  Backend& backend_;
  std::size_t channels_, spatial_;
  float eps_;
  Layout layout_ = Layout::kNchw;
  bool relu_ = false;
  dnnl::stream stream_;
  OnednnPlans<Plan> plans_;
  Buffer<std::byte> workspace_, unused_dx_;
};

}  // namespace

std::unique_ptr<BatchNormKernels> make_onednn_batch_norm(Backend& backend, std::size_t channels,
                                                         std::size_t spatial, std::size_t max_batch,
                                                         float eps) {
  return std::make_unique<OnednnBatchNorm>(backend, channels, spatial, max_batch, eps);
}

}  // namespace gradmesh::tasks::cpu
