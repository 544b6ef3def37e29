// The Model's set-up passes over its graph once the layers are built (issue 55): the layout of
// each activation, and the ReLUs that run inside the layer before them.
#include <cstddef>
#include <vector>

#include "tasks/cpu/cpu_backend.h"
#include "tasks/model.h"

namespace gradmesh::tasks {

void Model::choose_layouts() {
  const std::size_t count = shapes_.size();
  layouts_.assign(count, Layout::kNchw);
  if (!backend_->host_addressable() || cpu::kernels() != cpu::CpuKernels::kOnednn) return;
  // Activations a layer keeps alike (kFollows: its inputs and output) form one group; a group
  // is blocked unless one of its activations must be NCHW.
  std::vector<std::size_t> parent(count);
  for (std::size_t a = 0; a < count; ++a) parent[a] = a;
  const auto find = [&parent](std::size_t a) {
    while (parent[a] != a) a = parent[a] = parent[parent[a]];
    return a;
  };
  const Layout blocked = cpu::preferred_blocked_layout();
  if (blocked == Layout::kNchw) return;
  std::vector<bool> nchw(count, false);
  nchw[0] = true;          // the model's input, as the data source gives it
  nchw[count - 1] = true;  // the logits
  for (std::size_t a = 0; a < count; ++a) {
    const Shape& s = shapes_[a];
    if (s.channels % channel_block(blocked) != 0 || s.height * s.width <= 1) nchw[a] = true;
  }
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    switch (layers_[l]->layout_rule()) {
      case LayoutRule::kNchw:
        for (const std::size_t a : inputs_[l]) nchw[a] = true;
        nchw[l + 1] = true;
        break;
      case LayoutRule::kFollows:
        for (const std::size_t a : inputs_[l]) parent[find(a)] = find(l + 1);
        break;
      case LayoutRule::kGathers:
        nchw[l + 1] = true;
        break;
      case LayoutRule::kAdapts:
        break;
    }
  }
  std::vector<bool> group_nchw(count, false);
  for (std::size_t a = 0; a < count; ++a) {
    if (nchw[a]) group_nchw[find(a)] = true;
  }
  for (std::size_t a = 0; a < count; ++a) {
    layouts_[a] = group_nchw[find(a)] ? Layout::kNchw : blocked;
  }
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    if (layouts_[inputs_[l][0]] != Layout::kNchw || layouts_[l + 1] != Layout::kNchw) {
      layers_[l]->set_layouts(layouts_[inputs_[l][0]], layouts_[l + 1]);
    }
  }
}

void Model::fuse_relus() {
  for (std::size_t r = 0; r < layers_.size(); ++r) {
    if (layers_[r]->kind() != "relu") continue;
    const std::size_t a = inputs_[r][0];
    // The ReLU must be the only taker of a layer's output (the model's input has no layer).
    if (a == 0 || consumers_[a] != 1 || fused_[a - 1] || !layers_[a - 1]->fuse_relu()) continue;
    fused_[r] = true;
    // The ReLU's output and its gradient live in its input's buffers.
    storage_[r + 1] = storage_[a];
    activations_[r + 1] = {};
    deltas_[r + 1] = {};
    if (on_device()) {
      host_activations_[r + 1] = {};
      host_deltas_[r + 1] = {};
    }
  }
}

}  // namespace gradmesh::tasks
