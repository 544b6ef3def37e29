#include "tasks/optim/optimizer.h"

#include <array>
#include <cmath>
#include <string>

#include "engine/error.h"

namespace gradmesh::tasks {

namespace {

/// Whether [a, a + a_size) and [b, b + b_size) share a float.
bool overlaps(std::size_t a, std::size_t a_size, std::size_t b, std::size_t b_size) noexcept {
  return a < b + b_size && b < a + a_size;
}

}  // namespace

namespace {

SgdOptions without_decay(SgdOptions o) noexcept {
  o.weight_decay = 0.0f;
  return o;
}

/// Up to this many summands, step_sum splits them on the stack (no allocation per step).
constexpr std::size_t kStackSummands = 64;

}  // namespace

Optimizer::Optimizer(SgdOptions options, std::size_t parameter_count,
                     std::optional<AdamOptions> adam)
    : sgd_(options, /*check_finite=*/true),
      undecayed_(without_decay(options), /*check_finite=*/true),
      lr_(options.lr),
      velocity_(parameter_count, 0.0f),
      adam_(adam) {
  if (!adam_) return;
  const auto in_unit = [](float v) { return std::isfinite(v) && v >= 0.0f && v < 1.0f; };
  if (!in_unit(adam_->beta1)) {
    throw ConfigError("optimizer.beta1 = " + std::to_string(adam_->beta1) +
                      ": expected a value in [0, 1)");
  }
  if (!in_unit(adam_->beta2)) {
    throw ConfigError("optimizer.beta2 = " + std::to_string(adam_->beta2) +
                      ": expected a value in [0, 1)");
  }
  if (!std::isfinite(adam_->eps) || adam_->eps <= 0.0f) {
    throw ConfigError("optimizer.eps = " + std::to_string(adam_->eps) +
                      ": expected a finite value > 0");
  }
  second_.assign(parameter_count, 0.0f);
}

void Optimizer::adam_step(std::size_t offset, std::span<float> w, std::span<const float> g) {
  const std::span<float> m = velocity_at(offset, w.size());
  float* v = second_.data() + offset;
  const std::uint64_t t = t_.load(std::memory_order_relaxed);
  const float rate = lr();
  bool finite = true;
  for_each_decay_segment(offset, w.size(), [&](std::size_t b, std::size_t e, float decay) {
    finite &= adam_update(w.data() + b, g.data() + b, m.data() + b, v + b, e - b, *adam_,
                          adam_step_scalars(*adam_, t, rate, decay), check_finite_);
  });
  if (!finite) report_non_finite(offset, w, g);
}

void Optimizer::report_non_finite(std::size_t offset, std::span<const float> w,
                                  std::span<const float> g) {
  if (!all_finite(g)) {
    non_finite_.report(offset, g, "the summed gradient");
  } else {
    non_finite_.report(offset, w, "the parameters after the step (a finite gradient overflowed)");
  }
}

void Optimizer::exempt_from_weight_decay(std::vector<std::pair<std::size_t, std::size_t>> ranges) {
  std::size_t end = 0;
  for (const auto& [offset, size] : ranges) {
    GRADMESH_CHECK(offset >= end && offset + size <= velocity_.size(),
                   "Optimizer::exempt_from_weight_decay: ranges must be ascending, disjoint and "
                   "inside the model; got [" +
                       std::to_string(offset) + ", " + std::to_string(offset + size) + ")");
    end = offset + size;
  }
  std::erase_if(ranges, [](const auto& r) { return r.second == 0; });
  exempt_ = std::move(ranges);
}

void Optimizer::set_lr(float lr) {
  GRADMESH_CHECK(std::isfinite(lr) && lr >= 0.0f,
                 "Optimizer::set_lr: expected a finite rate >= 0, got " + std::to_string(lr));
  lr_.store(lr, std::memory_order_relaxed);
}

std::span<float> Optimizer::velocity_at(std::size_t offset, std::size_t size) {
  GRADMESH_CHECK_LE(offset + size, velocity_.size(), "Optimizer: range outside the model");
  for (const DeviceRange& d : device_) {
    GRADMESH_CHECK(!overlaps(offset, size, d.offset, d.velocity.size()),
                   "Optimizer: host velocity of [" + std::to_string(offset) + ", " +
                       std::to_string(offset + size) +
                       ") overlaps the range kept on the device "
                       "from offset " +
                       std::to_string(d.offset) + " (step it with step_on_device)");
  }
  return std::span<float>(velocity_).subspan(offset, size);
}

void Optimizer::step(std::size_t offset, std::span<float> w, std::span<const float> g) {
  GRADMESH_CHECK_EQ(g.size(), w.size(), "Optimizer::step: gradient size");
  if (adam_) {
    adam_step(offset, w, g);
    return;
  }
  const std::span<float> v = velocity_at(offset, w.size());
  const float rate = lr();
  bool finite = true;
  for_each_decay_segment(offset, w.size(), [&](std::size_t b, std::size_t e, float decay) {
    finite &= (decay == 0.0f ? undecayed_ : sgd_)
                  .step(w.subspan(b, e - b), g.subspan(b, e - b), v.subspan(b, e - b), rate);
  });
  if (!finite) report_non_finite(offset, w, g);
}

void Optimizer::step_sum(std::size_t offset, std::span<float> w,
                         std::span<const std::span<const float>> grads, float scale,
                         std::span<float> scratch) {
  if (adam_) {  // the mean gradient (summed in the given order, scaled), then Adam's step
    GRADMESH_CHECK(!grads.empty(), "Optimizer::step_sum: no gradients");
    GRADMESH_CHECK_EQ(scratch.size(), w.size(), "Optimizer::step_sum: scratch size");
    for (const auto& g : grads) {
      GRADMESH_CHECK_EQ(g.size(), w.size(), "Optimizer::step_sum: gradient size");
    }
    sum_gradients(grads, scale, scratch);
    adam_step(offset, w, scratch);
    return;
  }
  const std::span<float> v = velocity_at(offset, w.size());
  const float rate = lr();
  if (exempt_.empty()) {
    if (!sgd_.step_sum(w, grads, scale, v, scratch, rate)) report_non_finite(offset, w, scratch);
    return;
  }
  std::array<std::span<const float>, kStackSummands> on_stack;
  std::vector<std::span<const float>> on_heap;
  const std::span<std::span<const float>> parts =
      grads.size() <= kStackSummands
          ? std::span<std::span<const float>>(on_stack.data(), grads.size())
          : std::span<std::span<const float>>(
                on_heap = std::vector<std::span<const float>>(grads.size()));
  bool finite = true;
  for_each_decay_segment(offset, w.size(), [&](std::size_t b, std::size_t e, float decay) {
    for (std::size_t i = 0; i < grads.size(); ++i) {
      GRADMESH_CHECK_EQ(grads[i].size(), w.size(), "Optimizer::step_sum: gradient size");
      parts[i] = grads[i].subspan(b, e - b);
    }
    finite &= (decay == 0.0f ? undecayed_ : sgd_)
                  .step_sum(w.subspan(b, e - b), parts, scale, v.subspan(b, e - b),
                            scratch.subspan(b, e - b), rate);
  });
  if (!finite) report_non_finite(offset, w, scratch);
}

void Optimizer::step_plain(std::span<float> w, std::span<float> g) const {
  GRADMESH_CHECK_EQ(g.size(), w.size(), "Optimizer::step_plain: gradient size");
  const float lr = this->lr();
  const float wd = sgd_.options().weight_decay;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (wd != 0.0f) g[i] += wd * w[i];
    w[i] -= lr * g[i];
  }
}

void Optimizer::keep_on_device(Backend& backend, std::size_t offset, std::size_t size) {
  GRADMESH_CHECK(size > 0, "Optimizer::keep_on_device: empty range");
  const std::span<const float> host = velocity_at(offset, size);  // checks range and overlaps
  Buffer<float> velocity = backend.allocate<float>(size);
  // The source is never written again (the range is stepped on the device only), so the
  // asynchronous copy may read it whenever the device gets to it.
  backend.copy_to_device(velocity.data(), host.data(), size * sizeof(float));
  Buffer<float> second;
  if (adam_) {
    second = backend.allocate<float>(size);
    backend.copy_to_device(second.data(), second_.data() + offset, size * sizeof(float));
  }
  device_.push_back(DeviceRange{&backend, offset, std::move(velocity), std::move(second)});
}

void Optimizer::step_on_device(std::size_t offset, std::span<float> w, std::span<const float> g) {
  GRADMESH_CHECK_EQ(g.size(), w.size(), "Optimizer::step_on_device: gradient size");
  for (DeviceRange& d : device_) {
    if (d.offset != offset) continue;
    GRADMESH_CHECK_EQ(w.size(), d.velocity.size(), "Optimizer::step_on_device: range size");
    const SgdOptions o = options();
    const std::uint64_t t = t_.load(std::memory_order_relaxed);
    for_each_decay_segment(offset, w.size(), [&](std::size_t b, std::size_t e, float decay) {
      if (adam_) {
        d.backend->adam_step(w.data() + b, g.data() + b, d.velocity.data() + b, d.second.data() + b,
                             e - b, *adam_, adam_step_scalars(*adam_, t, o.lr, decay));
        return;
      }
      SgdOptions segment = o;
      segment.weight_decay = decay;
      d.backend->sgd_step(w.data() + b, g.data() + b, d.velocity.data() + b, e - b, segment);
    });
    return;
  }
  throw ContractError("Optimizer::step_on_device: no range kept on the device at offset " +
                      std::to_string(offset));
}

void Optimizer::save_state(engine::StateWriter& out) {
  // A range kept on the device: its host slice is unused, so it may hold the download.
  for (DeviceRange& d : device_) {
    d.backend->copy_to_host(velocity_.data() + d.offset, d.velocity.data(),
                            d.velocity.size() * sizeof(float));
    if (adam_) {
      d.backend->copy_to_host(second_.data() + d.offset, d.second.data(),
                              d.second.size() * sizeof(float));
    }
  }
  out.write_floats(velocity_);
  if (adam_) out.write_floats(second_);
}

void Optimizer::load_state(engine::StateReader& in) {
  in.read_floats(velocity_);
  if (adam_) in.read_floats(second_);
  for (DeviceRange& d : device_) {
    d.backend->copy_to_device(d.velocity.data(), velocity_.data() + d.offset,
                              d.velocity.size() * sizeof(float));
    if (adam_) {
      d.backend->copy_to_device(d.second.data(), second_.data() + d.offset,
                                d.second.size() * sizeof(float));
    }
    d.backend->synchronize();
  }
}

}  // namespace gradmesh::tasks
