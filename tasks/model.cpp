#include "tasks/model.h"

#include <algorithm>
#include <string>

#include "engine/error.h"
#include "tasks/cpu/cpu_backend.h"
#include "tasks/layers/softmax_cross_entropy.h"
#include "tasks/random.h"

namespace gradmesh::tasks {

Model::Model(const std::vector<LayerSpec>& specs, std::size_t input_size, std::size_t max_batch,
             std::uint64_t seed, std::unique_ptr<Backend> backend)
    : Model(specs, Shape::flat(input_size), max_batch, seed, std::move(backend)) {}

Model::Model(const std::vector<LayerSpec>& specs, Shape input_shape, std::size_t max_batch,
             std::uint64_t seed, std::unique_ptr<Backend> backend)
    : Model(specs, input_shape, max_batch, seed, std::move(backend), true) {}

Model Model::shapes_only(const std::vector<LayerSpec>& specs, Shape input_shape,
                         std::size_t max_batch, std::uint64_t seed) {
  return {specs, input_shape, max_batch, seed, nullptr, false};
}

Model::Model(const std::vector<LayerSpec>& specs, Shape input_shape, std::size_t max_batch,
             std::uint64_t seed, std::unique_ptr<Backend> backend, bool compute)
    : backend_(backend ? std::move(backend) : std::make_unique<cpu::CpuBackend>()),
      input_shape_(input_shape),
      max_batch_(max_batch),
      shapes_only_(!compute) {
  if (input_shape.size() == 0) {
    throw ConfigError("model: expected a non-empty input shape, got " + to_string(input_shape));
  }
  if (max_batch == 0) throw ConfigError("model: expected max_batch >= 1, got 0");
  build_graph(specs);
  offsets_.resize(layers_.size() + 1, 0);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    offsets_[l + 1] = offsets_[l] + layers_[l]->parameter_count();
  }
  Backend& be = *backend_;
  const bool device = on_device();
  parameters_ = be.allocate<float>(offsets_.back(), MemoryKind::kHostStaging);
  gradients_ = be.allocate<float>(offsets_.back(), MemoryKind::kHostStaging);
  if (device) {
    device_parameters_ = be.allocate<float>(offsets_.back());
    device_gradients_ = be.allocate<float>(offsets_.back());
    current_ = std::make_unique<std::atomic<Current>[]>(layers_.size());
    for (std::size_t l = 0; l < layers_.size(); ++l) current_[l].store(Current::kHost);
  }

  activations_.resize(layers_.size() + 1);
  deltas_.resize(layers_.size() + 1);
  storage_.resize(layers_.size() + 1);
  for (std::size_t a = 0; a < storage_.size(); ++a) storage_[a] = a;
  fused_.assign(layers_.size(), false);
  if (compute) activations_[0] = be.allocate<float>(max_batch * input_shape.size());
  if (device) {
    host_activations_.resize(layers_.size() + 1);
    host_deltas_.resize(layers_.size() + 1);
    host_activations_[0] =
        be.allocate<float>(max_batch * input_shape.size(), MemoryKind::kHostStaging);
  }
  // A tensor two layers take gets two gradients: the first written in place, the rest summed
  // in through these (one a layer input; only for graphs that branch).
  std::size_t largest = 0, fan_in = 1;
  bool branches = false;
  for (std::size_t a = 0; a < consumers_.size(); ++a) {
    largest = std::max(largest, max_batch * shapes_[a].size());
    branches = branches || consumers_[a] > 1;
  }
  for (const auto& in : inputs_) fan_in = std::max(fan_in, in.size());
  if (branches && compute) {
    for (std::size_t j = 0; j < fan_in; ++j) delta_scratch_.push_back(be.allocate<float>(largest));
  }
  delta_writer_.assign(consumers_.size(), 0);
  sources_.resize(fan_in);
  targets_.resize(fan_in);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const std::size_t out = max_batch * layers_[l]->output_size();
    if (compute) {
      activations_[l + 1] = be.allocate<float>(out);
      deltas_[l + 1] = be.allocate<float>(out);
    }
    if (device) {
      host_activations_[l + 1] = be.allocate<float>(out, MemoryKind::kHostStaging);
      host_deltas_[l + 1] = be.allocate<float>(out, MemoryKind::kHostStaging);
    }
    // initialize() writes on the host: bind the host copy for it, then the device copy.
    layers_[l]->bind(layer_slice(parameters_, l), layer_slice(gradients_, l));
    // Shapes-only: layers reserve for one sample (their state, such as batch norm's running
    // statistics, is the model's; their scratch is then small).
    layers_[l]->reserve(compute ? max_batch : 1);
    layers_[l]->initialize(derive_seed(seed, l));
    if (device)
      layers_[l]->bind(layer_slice(device_parameters_, l), layer_slice(device_gradients_, l));
  }
  choose_layouts();
  fuse_relus();
}

std::span<const float> Model::to_host(const Buffer<float>& src, const Buffer<float>& dst,
                                      std::size_t count) const {
  if (!on_device()) return std::span<const float>(src.data(), count);
  backend_->copy_to_host(dst.data(), src.data(), count * sizeof(float));
  return std::span<const float>(dst.data(), count);
}

std::span<float> Model::layer_slice(const Buffer<float>& b, std::size_t l) const noexcept {
  return b.span().subspan(offsets_[l], offsets_[l + 1] - offsets_[l]);
}

void Model::copy_parameters(std::size_t l, bool to_device) {
  const std::size_t bytes = (offsets_[l + 1] - offsets_[l]) * sizeof(float);
  if (bytes == 0) return;
  float* host = parameters_.data() + offsets_[l];
  float* device = device_parameters_.data() + offsets_[l];
  if (to_device) {
    backend_->copy_to_device(device, host, bytes);
  } else {
    backend_->copy_to_host(host, device, bytes);
  }
}

void Model::make_host_current(std::size_t l) {
  if (!current_) return;
  if (current_[l].load() == Current::kDevice) copy_parameters(l, false);
  current_[l].store(Current::kHost);
}

std::span<float> Model::parameters() {
  for (std::size_t l = 0; l < layers_.size(); ++l) make_host_current(l);
  return parameters_.span();
}

void Model::mark_parameters_changed() noexcept {
  if (!current_) return;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    Current both = Current::kBoth;
    current_[l].compare_exchange_strong(both, Current::kHost);
  }
}

void Model::set_training(bool training) {
  training_ = training;
  for (const auto& layer : layers_) layer->set_training(training);
}

bool Model::fused(std::size_t l) const {
  GRADMESH_CHECK_LT(l, layers_.size(), "Model::fused index");
  return fused_[l];
}

Layer& Model::layer(std::size_t l) {
  GRADMESH_CHECK_LT(l, layers_.size(), "Model::layer index");
  return *layers_[l];
}

std::size_t Model::parameter_offset(std::size_t l) const {
  GRADMESH_CHECK_LE(l, layers_.size(), "Model::parameter_offset index");
  return offsets_[l];
}

std::size_t Model::layer_at_offset(std::size_t offset) const {
  GRADMESH_CHECK_LT(offset, parameters_.size(), "Model::layer_at_offset offset");
  // The last l with offsets_[l] <= offset: the one layer whose range holds it (an empty layer's
  // range ends where it starts, so a later layer with the same start is the one).
  const auto above = std::upper_bound(offsets_.begin(), offsets_.end(), offset);
  return static_cast<std::size_t>(above - offsets_.begin()) - 1;
}

std::string Model::layer_name(std::size_t l) const {
  GRADMESH_CHECK_LT(l, layers_.size(), "Model::layer_name index");
  return std::string(layers_[l]->kind()) + std::to_string(l);
}

std::span<float> Model::layer_parameters(std::size_t l) {
  GRADMESH_CHECK_LT(l, layers_.size(), "Model::layer_parameters index");
  make_host_current(l);
  return layer_slice(parameters_, l);
}

std::vector<std::pair<std::size_t, std::size_t>> Model::weight_decay_exempt() const {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const std::size_t begin = offsets_[l] + layers_[l]->decayed_parameter_count();
    const std::size_t end = offsets_[l + 1];
    if (begin >= end) continue;
    if (!ranges.empty() && ranges.back().first + ranges.back().second == begin) {
      ranges.back().second += end - begin;
    } else {
      ranges.emplace_back(begin, end - begin);
    }
  }
  return ranges;
}

std::span<float> Model::layer_gradients(std::size_t l) {
  GRADMESH_CHECK_LT(l, layers_.size(), "Model::layer_gradients index");
  return layer_slice(gradients_, l);
}

std::span<float> Model::device_layer_parameters(std::size_t l) {
  GRADMESH_CHECK_LT(l, layers_.size(), "Model::device_layer_parameters index");
  if (!on_device()) return layer_slice(parameters_, l);
  if (current_[l].exchange(Current::kDevice) == Current::kHost) copy_parameters(l, true);
  return layer_slice(device_parameters_, l);
}

std::span<float> Model::device_layer_gradients(std::size_t l) {
  GRADMESH_CHECK_LT(l, layers_.size(), "Model::device_layer_gradients index");
  return layer_slice(on_device() ? device_gradients_ : gradients_, l);
}

void Model::check_batch(std::size_t batch) const {
  GRADMESH_CHECK(!shapes_only_,
                 "a shapes-only model (Model::shapes_only, for planning) computes nothing");
  GRADMESH_CHECK(
      batch >= 1 && batch <= max_batch_,
      "batch " + std::to_string(batch) + " outside [1, " + std::to_string(max_batch_) + "]");
}

std::span<float> Model::input(std::size_t batch) {
  check_batch(batch);
  const Buffer<float>& host = on_device() ? host_activation(0) : activation(0);
  return host.span().first(batch * input_size());
}

void Model::forward_layer(std::size_t l, std::size_t batch) {
  GRADMESH_CHECK_LT(l, layers_.size(), "Model::forward_layer index");
  check_batch(batch);
  if (fused_[l]) {  // computed by the layer before it
    if (l + 1 == layers_.size()) forward_batch_ = batch;
    return;
  }
  if (on_device()) {
    if (l == 0) {
      backend_->copy_to_device(activation(0).data(), host_activation(0).data(),
                               batch * input_size() * sizeof(float));
    }
    Current host = Current::kHost;
    if (current_[l].compare_exchange_strong(host, Current::kBoth)) copy_parameters(l, true);
  }
  const std::vector<std::size_t>& in = inputs_[l];
  for (std::size_t j = 0; j < in.size(); ++j) sources_[j] = activation(in[j]).data();
  layers_[l]->forward_inputs(std::span(sources_.data(), in.size()), activation(l + 1).data(),
                             batch);
  if (l + 1 == layers_.size()) forward_batch_ = batch;
}

float Model::loss_backward(std::span<const std::int32_t> labels) {
  GRADMESH_CHECK(!shapes_only_,
                 "a shapes-only model (Model::shapes_only, for planning) computes nothing");
  GRADMESH_CHECK_EQ(labels.size(), forward_batch_, "loss_backward: labels vs last forward batch");
  std::fill(delta_writer_.begin(), delta_writer_.end(), 0);  // a new backward pass
  if (!loss_) {
    return backend_->softmax_cross_entropy(activation(layers_.size()).data(), labels, output_size(),
                                           delta(layers_.size()).data());
  }
  // A user's loss computes on the host: the logits down, the gradient up on a device.
  const std::size_t floats = forward_batch_ * output_size();
  const std::span<const float> logits = output(forward_batch_);
  float* dlogits = on_device() ? host_delta(layers_.size()).data() : delta(layers_.size()).data();
  const float mean_loss =
      loss_->forward_backward(logits, labels, output_size(), std::span<float>(dlogits, floats));
  if (on_device()) {
    backend_->copy_to_device(delta(layers_.size()).data(), dlogits, floats * sizeof(float));
  }
  return mean_loss;
}

void Model::backward_layer(std::size_t l, std::size_t batch) {
  GRADMESH_CHECK_LT(l, layers_.size(), "Model::backward_layer index");
  check_batch(batch);
  if (fused_[l]) return;  // the layer before it masks the gradient
  // Each input's gradient: none for the model's input; written in place by the first (highest)
  // layer that takes the tensor; summed in by the others (WFBP order: reverse topological).
  const std::vector<std::size_t>& in = inputs_[l];
  for (std::size_t j = 0; j < in.size(); ++j) {
    const std::size_t a = in[j];
    sources_[j] = activation(a).data();
    // The first layer to take the tensor writes it; the same layer again (a repeated
    // backward_layer(l), as profile_layers times the input gradient alone) rewrites it.
    const bool first_use = std::find(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(j), a) ==
                           in.begin() + static_cast<std::ptrdiff_t>(j);
    if (a == 0) {
      targets_[j] = nullptr;
    } else if (delta_writer_[a] == 0 || (delta_writer_[a] == l + 1 && first_use)) {
      targets_[j] = delta(a).data();
      delta_writer_[a] = l + 1;
    } else {
      targets_[j] = delta_scratch_[j].data();
    }
  }
  layers_[l]->backward_inputs(std::span(sources_.data(), in.size()), activation(l + 1).data(),
                              delta(l + 1).data(), std::span(targets_.data(), in.size()), batch);
  for (std::size_t j = 0; j < in.size(); ++j) {
    if (targets_[j] != nullptr && targets_[j] != delta(in[j]).data()) {
      backend_->accumulate(delta(in[j]).data(), targets_[j], batch * shapes_[in[j]].size());
    }
  }
  if (on_device()) {
    const std::size_t count = offsets_[l + 1] - offsets_[l];
    if (count > 0 && layers_[l]->parameter_gradients_enabled()) {
      backend_->copy_to_host(gradients_.data() + offsets_[l],
                             device_gradients_.data() + offsets_[l], count * sizeof(float));
    }
    // The sync stage / optimizer writes the host parameters next (unless the layer is updated
    // on the device: then its device copy stays the current one).
    Current both = Current::kBoth;
    current_[l].compare_exchange_strong(both, Current::kHost);
  }
}

std::span<const float> Model::layer_input(std::size_t l, std::size_t batch) const {
  check_batch(batch);
  GRADMESH_CHECK_LT(l, layers_.size(), "Model::layer_input: no such layer");
  const std::size_t a = inputs_[l][0];
  return to_host(activation(a), on_device() ? host_activation(a) : activation(a),
                 batch * layers_[l]->input_size());
}

std::span<const float> Model::layer_output_gradient(std::size_t l, std::size_t batch) const {
  check_batch(batch);
  GRADMESH_CHECK_LT(l, layers_.size(), "Model::layer_output_gradient: no such layer");
  return to_host(delta(l + 1), on_device() ? host_delta(l + 1) : delta(l + 1),
                 batch * layers_[l]->output_size());
}

std::span<const float> Model::output(std::size_t batch) const {
  check_batch(batch);
  return to_host(activation(layers_.size()),
                 on_device() ? host_activation(layers_.size()) : activation(layers_.size()),
                 batch * output_size());
}

float Model::forward_backward(std::span<const float> x, std::span<const std::int32_t> y) {
  const std::size_t batch = y.size();
  GRADMESH_CHECK_EQ(x.size(), batch * input_size(), "forward_backward: x size");
  const std::span<float> in = input(batch);
  std::copy(x.begin(), x.end(), in.begin());
  for (std::size_t l = 0; l < layers_.size(); ++l) forward_layer(l, batch);
  const float mean_loss = loss_backward(y);
  for (std::size_t l = layers_.size(); l-- > 0;) backward_layer(l, batch);
  return mean_loss;
}

Model::Evaluation Model::evaluate(const Dataset& d) {
  if (d.features != input_size()) {
    throw ConfigError("evaluate: model expects " + std::to_string(input_size()) +
                      " features, data set has " + std::to_string(d.features));
  }
  if (d.classes > output_size()) {
    throw ConfigError("evaluate: model outputs " + std::to_string(output_size()) +
                      " classes, data set has " + std::to_string(d.classes));
  }
  if (d.count == 0) return {0.0, 0.0};
  double loss_sum = 0.0;
  std::size_t correct = 0;
  forward_in_batches(
      d.x.data(), d.count, [&](std::size_t first, std::size_t batch, const float* logits) {
        const std::int32_t* labels = d.y.data() + first;
        const float mean = loss_ ? loss_->loss(std::span(logits, batch * output_size()),
                                               std::span(labels, batch), output_size())
                                 : SoftmaxCrossEntropy::loss(logits, labels, batch, output_size());
        loss_sum += static_cast<double>(mean) * static_cast<double>(batch);
        correct += SoftmaxCrossEntropy::count_correct(logits, labels, batch, output_size());
      });
  const auto n = static_cast<double>(d.count);
  return {loss_sum / n, static_cast<double>(correct) / n};
}

void Model::predict(std::span<const float> inputs, std::span<float> logits) {
  GRADMESH_CHECK_EQ(inputs.size() % input_size(), std::size_t{0},
                    "predict: input floats, a multiple of the model's input size");
  const std::size_t count = inputs.size() / input_size();
  GRADMESH_CHECK_EQ(logits.size(), count * output_size(), "predict: logit floats");
  if (count == 0) return;
  const std::size_t classes = output_size();
  forward_in_batches(inputs.data(), count,
                     [&](std::size_t first, std::size_t batch, const float* out) {
                       std::copy(out, out + batch * classes,
                                 logits.begin() + static_cast<std::ptrdiff_t>(first * classes));
                     });
}

void Model::forward_in_batches(
    const float* x, std::size_t count,
    const std::function<void(std::size_t, std::size_t, const float*)>& each) {
  // Evaluation mode for the loop, and the caller's mode back on every exit.
  struct ModeGuard {
    Model& model;
    bool saved;
    ~ModeGuard() { model.set_training(saved); }
  } guard{*this, training_};
  set_training(false);
  for (std::size_t first = 0; first < count; first += max_batch_) {
    const std::size_t batch = std::min(max_batch_, count - first);
    const float* from = x + first * input_size();
    std::copy(from, from + batch * input_size(), input(batch).begin());
    for (std::size_t l = 0; l < layers_.size(); ++l) forward_layer(l, batch);
    each(first, batch, output(batch).data());
  }
}

}  // namespace gradmesh::tasks
