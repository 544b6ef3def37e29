#pragma once
// The feed-forward model one node trains: its layers, one flat parameter buffer and one flat
// gradient buffer (so the sync stage sees each layer's slice as one contiguous tensor), and the
// activation buffers of one mini-batch.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpoint.h"
#include "tasks/backend.h"
#include "tasks/data/dataset.h"
#include "tasks/layers/layer.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/layers/loss.h"
#include "tasks/shape.h"

namespace gradmesh::tasks {

/// A stack (or graph) of Layers ending in a loss, SoftmaxCrossEntropy or a user's registered one
/// (tasks/layers/loss.h), with every buffer allocated once in the constructor: forward_layer /
/// loss_backward / backward_layer never allocate (a user's Loss may, if it is written to).
///
/// Memory layout: parameters() is layer 0's parameters, then layer 1's, ... contiguous
/// (parameter_offset(l) says where layer l's start; for a Dense layer they are [W (M x N) | b
/// (M)], for a Conv2d [W (F x C x k x k) | b (F)]). gradients() has the same layout. Activations
/// are NCHW (see Layer): input(batch) is batch x input_shape(); layer l's output is batch x
/// layer(l).output_shape(), which is layer l + 1's input_shape().
///
/// Per-step protocol (what forward_backward() does, and what compute tasks do one layer at a
/// time for WFBP): write input(batch); forward_layer(0..L-1, batch); loss_backward(labels);
/// backward_layer(L-1..0, batch) — after backward_layer(l) returns, layer_gradients(l) is final
/// for this step and may be sent.
///
/// Compute device: the Model owns a Backend (tasks/backend.h; CPU by default, or the one passed
/// in, e.g. make_backend("cuda")) and every layer computes through it. All spans the Model
/// returns (parameters(), gradients(), layer_parameters/gradients, input, layer_input,
/// layer_output_gradient, output) are HOST memory on every backend, so sync stages never ship a
/// device pointer; the one exception is device_layer_parameters / device_layer_gradients, which
/// a sync stage passes only to the backend's kernels (the device-side update path below). On the
/// CPU backend all of them are the compute buffers themselves (no copies; results bitwise
/// identical to the pre-backend code). On a device backend (CUDA) the Model keeps device copies
/// of parameters, gradients and all activations and deltas, and the host spans are pinned
/// staging buffers (cudaMallocHost), kept in step as follows:
///  - gradients: backward_layer(l) copies layer l's gradients device -> host before it returns
///    (unless the layer's parameter gradients are disabled, as SFB does), so WFBP may ship them
///    at once. Cost: one device-to-host copy of the layer's gradients and a wait per backward. A
///    gradient that a sync stage forms on the device (device_layer_gradients, SFB's rebuild) is
///    never copied to the host: the host slice keeps what it held.
///  - parameters: per layer, the Model records which copy is current (atomically):
///      both:   the two copies agree;
///      host:   the host copy is current (a host optimizer step, a PS broadcast or Ako wrote it, or
///              may write it): forward_layer(l) uploads it first (asynchronous) -> both;
///      device: the device copy is current (a sync stage updated the layer on the device: SFB's
///              rebuild + Optimizer::step_on_device, Poseidon ATC'17 sec. 3.2): forward_layer(l)
///              uploads nothing; a host access downloads it first.
///    Transitions: construction -> host (initialize() writes the host copy). parameters() and
///    layer_parameters(l) hand out a host span the caller may write: a device-current layer is
///    downloaded first (one copy and a wait), then -> host. backward_layer(l) and
///    mark_parameters_changed(): both -> host (the sync stage writes the host copy next, perhaps
///    through a span it holds); a device-current layer stays device (writes through a host span
///    taken before it became device-current are lost: take a fresh one). device_layer_parameters(l)
///    hands out the device span for writing: a host-current layer is uploaded first, then ->
///    device. So a layer stepped on the host is uploaded once per step; a layer stepped on the
///    device never crosses PCIe, except when the host reads it (save_parameters, tests); and
///    evaluate() after training transfers no parameters per batch. Writes through a host span
///    held from earlier (a PS shard, Ako) that land outside training, after the layer's last
///    backward, are seen only after mark_parameters_changed().
///  - input(batch) is staging; forward_layer(0) uploads the batch.
///  - layer_input / layer_output_gradient / output copy device -> staging on every call (one copy
///    of the span's floats and a wait for the device): what SFB and evaluation read.
///
/// Thread safety: none; one Model is driven by one thread at a time, though distinct layers'
/// parameter/gradient slices may be read by other threads once their backward step is done, and
/// layer_parameters(l) may be called from another thread for a layer that is not device-current
/// (the state is atomic; PS and all-reduce layers never are). On a device model, everything that
/// uses the device's stream — layer_input / layer_output_gradient / output, device_layer_*, and
/// parameters() / layer_parameters(l) when they download a device-current layer — must be called
/// from the thread driving the Model (the compute arena's: the sync stage's backward hook, SFB's
/// apply task) or while it is idle. Moving a Model keeps all spans valid; copying is not allowed.
///
/// Checkpoints (engine::Checkpointable, Poseidon arXiv'15 sec. 4.4): the state is the replica,
/// parameters() (m floats), and each layer's random_state() (dropout's mask index); activations
/// and gradients are not state (each iteration rewrites them before reading). load_state throws
/// CheckpointError when the saved model has another parameter or layer count.
class Model final : public engine::Checkpointable {
 public:
  /// Builds layers from `specs` (as parse_layer_specs returns them; the trailing entry is the
  /// loss: "softmax_cross_entropy", or a kind registered with register_loss, made here) for samples
  /// of shape `input_shape` (the data set's: Fashion-MNIST 1 x 28 x 28) and batches of at most
  /// `max_batch`: each layer's input shape is its input's output shape, and every layer's scratch
  /// is sized here (Layer::reserve).
  ///
  /// A graph (issue 29 item 1): an entry takes the entry before it unless it names its inputs
  /// (LayerSpec::inputs: earlier entries' names, or "input"), so a stack needs no names. Layer l
  /// is the l-th layer in list order (a "basic_block" entry expands to its 7 or 9 layers there:
  /// conv, batch_norm, relu, conv, batch_norm, [projection conv, batch_norm,] add, relu; a
  /// "bottleneck_block" to its 10 or 12: conv 1x1, batch_norm, relu, conv 3x3, batch_norm, relu,
  /// conv 1x1, batch_norm, [projection conv, batch_norm,] add, relu), and the
  /// list is the graph in topological order: forward_layer runs 0 .. L-1, backward_layer L-1 .. 0,
  /// and each layer's gradient is final when its backward ends (WFBP in reverse topological
  /// order). A tensor that several layers take gets the sum of their gradients (the first written
  /// in place, the rest through a scratch buffer and Backend::accumulate). Errors name the entry
  /// and what was expected: an unknown input or one listed later (a cycle cannot be listed), a
  /// name used twice, an add of different shapes, an output no later entry takes.
  /// Initialises layer l from derive_seed(seed, l), so every node with the same seed holds
  /// identical weights. Starts in training mode. Throws gradmesh::ConfigError if the input shape
  /// is empty or max_batch is 0, a kind is unknown, the loss is not last, there is no layer before
  /// the loss, a layer does not fit its input (a kernel larger than the padded input, ...) or the
  /// loss's input is not flat; a layer's error reads "model.layers[i] '<spec>': <what was
  /// expected>", with the spec in canonical form (to_string(LayerSpec)).
  ///
  /// Layouts (issue 55): on the CPU backend with oneDNN's kernels, an activation of a multiple of
  /// 16 (AVX-512) or 8 (AVX2) channels on more than one pixel lies in the blocked layout oneDNN's
  /// convolutions prefer on this CPU (cpu::preferred_blocked_layout(): nChw16c or nChw8c)
  /// when every layer that gives or takes it allows (Layer::layout_rule: a convolution converts,
  /// batch norms, ReLUs and adds keep their inputs' layout, global average pooling gathers it),
  /// so a ResNet's chains of convolutions run without a reorder between them; the model's input,
  /// its logits and every other activation are NCHW (layout()).
  ///
  /// Fusion (issue 55): a ReLU that is the only layer taking another layer's output runs inside
  /// that layer when it accepts (Layer::fuse_relu: an add on every backend, a batch norm on
  /// oneDNN's kernels): the two share one activation buffer and one gradient buffer, which hold
  /// the ReLU's output and the gradient wrt it, and the ReLU itself computes nothing (fused(l)).
  /// The results are the unfused graph's: the same bits for an add, for a batch norm those of
  /// oneDNN's fused primitive. layer_input / layer_output_gradient of the two layers then give
  /// that shared tensor.
  ///
  /// `backend`: the device to compute on (nullptr: a new cpu::CpuBackend); the Model owns it.
  /// Throws DeviceError when the device cannot hold the model.
  Model(const std::vector<LayerSpec>& specs, Shape input_shape, std::size_t max_batch,
        std::uint64_t seed, std::unique_ptr<Backend> backend = nullptr);
  /// The same for flat inputs of `input_size` features (input_size x 1 x 1).
  Model(const std::vector<LayerSpec>& specs, std::size_t input_size, std::size_t max_batch,
        std::uint64_t seed, std::unique_ptr<Backend> backend = nullptr);
  /// A model for planning only (gradmesh-node plan and simulate on networks too large to train
  /// here, e.g. VGG19 at 224 x 224): the graph, shapes, layouts and parameters (initialized as
  /// the constructor does, and the layers' state) but no activations or gradients of
  /// activations, and layer scratch for one sample only, so it costs about the parameters'
  /// memory alone. Anything that computes (input, forward_layer,
  /// loss_backward, backward_layer, layer_input, layer_output_gradient, output, evaluate,
  /// predict) throws ContractError. Errors as the constructor's.
  [[nodiscard]] static Model shapes_only(const std::vector<LayerSpec>& specs, Shape input_shape,
                                         std::size_t max_batch, std::uint64_t seed);
  /// Whether this model was made by shapes_only().
  [[nodiscard]] bool is_shapes_only() const noexcept { return shapes_only_; }
  Model(Model&&) noexcept = default;
  Model& operator=(Model&&) noexcept = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model() = default;

  /// The backend the layers compute on.
  [[nodiscard]] Backend& backend() const noexcept { return *backend_; }
  /// Whether the model computes on a device other than the host (device copies + host staging).
  [[nodiscard]] bool on_device() const noexcept { return !backend_->host_addressable(); }

  /// Number of Layers (the loss is not one).
  [[nodiscard]] std::size_t num_layers() const noexcept { return layers_.size(); }
  /// The layout of activation a (0: the input; l + 1: layer l's output) and of its gradient.
  [[nodiscard]] Layout layout(std::size_t activation) const { return layouts_.at(activation); }
  /// Whether layer l is a ReLU computed inside the layer before it (see Fusion in the
  /// constructor's comment). Throws gradmesh::ContractError if l >= num_layers().
  [[nodiscard]] bool fused(std::size_t l) const;
  /// Layer l (l < num_layers(), else gradmesh::ContractError).
  [[nodiscard]] Layer& layer(std::size_t l);
  /// Shape of one input sample.
  [[nodiscard]] const Shape& input_shape() const noexcept { return input_shape_; }
  /// Floats of one input sample (input_shape().size()).
  [[nodiscard]] std::size_t input_size() const noexcept { return input_shape_.size(); }
  /// Features of one output row (the classes of the loss).
  [[nodiscard]] std::size_t output_size() const noexcept { return layers_.back()->output_size(); }
  /// Largest batch the buffers hold.
  [[nodiscard]] std::size_t max_batch() const noexcept { return max_batch_; }

  /// Training (true, the default) or evaluation mode for every layer (Layer::set_training): in
  /// evaluation, dropout is the identity. evaluate() switches to evaluation for its duration.
  void set_training(bool training);
  [[nodiscard]] bool training() const noexcept { return training_; }

  /// m: floats of parameters over all layers.
  [[nodiscard]] std::size_t parameter_count() const noexcept { return parameters_.size(); }
  /// All parameters, flat, host memory (see the class comment for the layout). On a device:
  /// downloads every device-current layer first, then makes the host copy of every layer the
  /// current one (the caller may write it; each is uploaded before its next forward). Throws
  /// DeviceError when a download fails.
  [[nodiscard]] std::span<float> parameters();
  /// All gradients of the last backward pass, same layout as parameters(), host memory.
  [[nodiscard]] std::span<float> gradients() noexcept { return gradients_.span(); }
  /// On a device model, makes the next forward_layer(l) of every layer that is not
  /// device-current upload its parameters from the host copy (a no-op on the CPU; a
  /// device-current layer keeps its device copy). Thread safety: may be called from any thread.
  void mark_parameters_changed() noexcept;
  /// Offset, in floats, of layer l's parameters in parameters(); l == num_layers() gives
  /// parameter_count(). Throws gradmesh::ContractError if l > num_layers().
  [[nodiscard]] std::size_t parameter_offset(std::size_t l) const;
  /// The layer whose parameters hold float `offset` of parameters(). Throws
  /// gradmesh::ContractError if offset >= parameter_count().
  [[nodiscard]] std::size_t layer_at_offset(std::size_t offset) const;
  /// Layer l's name in plans, logs and errors: its kind and index, "dense2", "conv2d0". Throws
  /// gradmesh::ContractError if l >= num_layers().
  [[nodiscard]] std::string layer_name(std::size_t l) const;
  /// Layer l's slice of parameters() (empty for parameter-free layers). On a device: downloads
  /// the layer first if its device copy is current, then makes the host copy current (uploaded
  /// before the next forward_layer(l)). Throws gradmesh::ContractError if l >= num_layers(),
  /// DeviceError when the download fails.
  [[nodiscard]] std::span<float> layer_parameters(std::size_t l);
  /// The parameter ranges optimizer.weight_decay_exclude exempts from weight decay, as (offset,
  /// size) pairs, ascending, disjoint, adjacent ones merged: each layer's parameters after its
  /// Layer::decayed_parameter_count() (biases, batch normalization's gamma and beta). For
  /// Optimizer::exempt_from_weight_decay.
  [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> weight_decay_exempt() const;
  /// Layer l's slice of gradients().
  [[nodiscard]] std::span<float> layer_gradients(std::size_t l);
  /// Layer l's parameters in the backend's memory, for a sync stage that updates the layer on the
  /// device (Backend kernels, Optimizer::step_on_device): on a device model a span of DEVICE
  /// memory (never dereference it on the host; pass it to the backend only), on the CPU the host
  /// slice itself (layer_parameters(l) without the bookkeeping). On a device: uploads the layer
  /// first (enqueued) if its host copy is current, then makes the device copy current until a
  /// host access (parameters(), layer_parameters(l)) downloads it. Call from the thread driving
  /// the Model. Throws gradmesh::ContractError if l >= num_layers().
  [[nodiscard]] std::span<float> device_layer_parameters(std::size_t l);
  /// Layer l's gradients in the backend's memory (device memory on a device model, the host slice
  /// on the CPU), where a sync stage writes a gradient it forms on the device (SFB's rebuild);
  /// nothing is copied and no state changes. Throws gradmesh::ContractError if l >= num_layers().
  [[nodiscard]] std::span<float> device_layer_gradients(std::size_t l);

  /// The input buffer for a batch of `batch` rows (batch x input_size()): write the batch here.
  /// Throws gradmesh::ContractError unless 1 <= batch <= max_batch().
  [[nodiscard]] std::span<float> input(std::size_t batch);
  /// Runs layer l forward on the first `batch` rows of its input activations.
  void forward_layer(std::size_t l, std::size_t batch);
  /// Loss of the last full forward against `labels` (labels.size() == that batch), and writes the
  /// gradient of the mean loss wrt the logits. Returns the mean loss (nats for the built-in
  /// softmax cross-entropy). A user's Loss runs on the host: on a device model the logits are
  /// downloaded and the gradient uploaded (batch x classes floats each way).
  float loss_backward(std::span<const std::int32_t> labels);
  /// Back-propagates through layer l: overwrites layer_gradients(l) and writes the gradient wrt
  /// each of layer l's inputs but the model's own (in a graph, summed into what later layers
  /// taking the same tensor wrote). Needs loss_backward and backward_layer of every later layer
  /// first (l == num_layers() - 1 down to 0). Called again for the same l before the next
  /// loss_backward, it rewrites the same values, except that a tensor other layers take too gets
  /// layer l's share summed in again (profile_layers times such repeats only).
  void backward_layer(std::size_t l, std::size_t batch);
  /// Layer l's input activations of the last forward: batch x layer(l).input_size(), row-major.
  /// For a Dense layer this is V of its sufficient factors (Poseidon ATC'17 sec. 2.1).
  [[nodiscard]] std::span<const float> layer_input(std::size_t l, std::size_t batch) const;
  /// Gradient of the mean loss wrt layer l's output, from the last backward pass (valid once
  /// backward_layer(l) may run): batch x layer(l).output_size(). For a Dense layer this is U of its
  /// sufficient factors: dW = U^T V.
  [[nodiscard]] std::span<const float> layer_output_gradient(std::size_t l,
                                                             std::size_t batch) const;
  /// Logits of the last forward: batch x output_size().
  [[nodiscard]] std::span<const float> output(std::size_t batch) const;

  /// Convenience for tests and the single-node baseline: copies x (batch x input_size()) in, runs
  /// the full forward, the loss, and the full backward; returns the mean loss. batch = y.size().
  float forward_backward(std::span<const float> x, std::span<const std::int32_t> y);

  struct Evaluation {
    double loss;      ///< mean loss (the model's: cross-entropy in nats) over the data set
    double accuracy;  ///< fraction of examples whose argmax logit is the label, in [0, 1]
    /// A user's evaluation's own figures (issue 29 item 3), by name ("top5", "f1", ...): written
    /// to the metrics file per epoch (test_metrics, epoch_test_metrics), shown on the epoch line
    /// and by scripts/report. Names are letters, digits, '_', '.' and '-' (the pipeline rejects
    /// others); Model::evaluate gives none.
    std::vector<std::pair<std::string, double>> metrics = {};
  };
  /// Forward over all of `d` in batches of max_batch(), in evaluation mode (the mode is restored
  /// after); touches no gradients (but overwrites the activations). Throws gradmesh::ConfigError if
  /// d.features != input_size() or d.classes > output_size() (a model may have more outputs than
  /// the data set's classes: the softmax then spreads over them all, as in training). An empty
  /// data set gives {0, 0}.
  Evaluation evaluate(const Dataset& d);

  /// The logits of `inputs` (count x input_size() floats, count = inputs.size() / input_size(),
  /// any count) into `logits` (count x output_size() floats, row k sample k's), for a user's own
  /// evaluation loop (issue 29 item 3): forward in batches of max_batch(), in evaluation mode (the
  /// mode is restored after; dropout is the identity), as evaluate() computes them. Touches no
  /// gradients (but overwrites the activations). Throws gradmesh::ContractError when inputs.size()
  /// is not a multiple of input_size() or logits.size() != count x output_size().
  void predict(std::span<const float> inputs, std::span<float> logits);

  /// Floats of every layer's own state together (Layer::state_size(): batch normalization's
  /// running statistics), in layer order; 0 for a model without such layers.
  [[nodiscard]] std::size_t layer_state_size() const noexcept;
  /// Copies every layer's own state into `out` (layer_state_size() floats, host memory), in
  /// layer order (a device model downloads). Throws gradmesh::ContractError for another size.
  void save_layer_states(std::span<float> out);
  /// Replaces every layer's own state from `in` (layer_state_size() floats): an average of the
  /// nodes' running statistics (Ako's final model). Throws gradmesh::ContractError for another
  /// size.
  void load_layer_states(std::span<const float> in);

  /// Writes parameters(), every layer's random_state() and, for each layer with some, its own
  /// state (Layer::state_size(): batch normalization's running statistics) (a device model
  /// downloads first).
  void save_state(engine::StateWriter& out) override;
  /// Replaces parameters() (uploaded before the next forward) and the layers' random states.
  void load_state(engine::StateReader& in) override;

 private:
  /// The constructor's work; `compute` false: shapes_only().
  Model(const std::vector<LayerSpec>& specs, Shape input_shape, std::size_t max_batch,
        std::uint64_t seed, std::unique_ptr<Backend> backend, bool compute);
  void check_batch(std::size_t batch) const;
  /// The layers of `specs` in list order, each entry's inputs resolved (see the constructor).
  void build_graph(const std::vector<LayerSpec>& specs);
  /// Sets layouts_ and tells each layer its own (see the constructor's comment).
  void choose_layouts();
  /// Fuses each ReLU that can be into the layer before it: fused_, storage_, the ReLU's own
  /// buffers released (see Fusion in the constructor's comment). After choose_layouts.
  void fuse_relus();
  /// The buffers of activation a and of its gradient (a fused ReLU's output: its input's).
  [[nodiscard]] Buffer<float>& activation(std::size_t a) { return activations_[storage_[a]]; }
  [[nodiscard]] const Buffer<float>& activation(std::size_t a) const {
    return activations_[storage_[a]];
  }
  [[nodiscard]] Buffer<float>& delta(std::size_t a) { return deltas_[storage_[a]]; }
  [[nodiscard]] const Buffer<float>& delta(std::size_t a) const { return deltas_[storage_[a]]; }
  [[nodiscard]] Buffer<float>& host_activation(std::size_t a) {
    return host_activations_[storage_[a]];
  }
  [[nodiscard]] const Buffer<float>& host_activation(std::size_t a) const {
    return host_activations_[storage_[a]];
  }
  [[nodiscard]] Buffer<float>& host_delta(std::size_t a) { return host_deltas_[storage_[a]]; }
  [[nodiscard]] const Buffer<float>& host_delta(std::size_t a) const {
    return host_deltas_[storage_[a]];
  }
  /// Appends the layer `spec` (its name and inputs ignored) taking activations `inputs`; returns
  /// its output's activation. Throws ConfigError as make_layer.
  std::size_t add_node(const LayerSpec& spec, const std::vector<std::size_t>& inputs);
  /// Appends basic_block or bottleneck_block `spec`'s layers taking activation `input`; returns
  /// its output's activation. Named parts ("<name>.conv1", ...) go into `names`.
  std::size_t add_residual_block(const LayerSpec& spec, std::size_t input,
                                 std::map<std::string, std::size_t>& names);

  /// On a device model: `count` floats of device buffer `src` into staging `dst`; returns dst's
  /// first count floats (src's own span on the CPU).
  std::span<const float> to_host(const Buffer<float>& src, const Buffer<float>& dst,
                                 std::size_t count) const;
  /// Layer l's slice of a buffer in parameters() layout.
  [[nodiscard]] std::span<float> layer_slice(const Buffer<float>& b, std::size_t l) const noexcept;
  /// Device model: layer l's parameters host -> device (enqueued) or device -> host (waits); no
  /// copy for a parameter-free layer.
  void copy_parameters(std::size_t l, bool to_device);
  /// Device model: downloads layer l's parameters if its device copy is current, then marks the
  /// host copy current. No-op on the CPU.
  void make_host_current(std::size_t l);
  /// Forward of the `count` samples at `x` (count x input_size() floats) in batches of
  /// max_batch(), in evaluation mode (restored after): `each(first, batch, logits)` sees the
  /// logits (host, batch x output_size()) of samples first .. first + batch - 1.
  void forward_in_batches(const float* x, std::size_t count,
                          const std::function<void(std::size_t, std::size_t, const float*)>& each);

  /// Which copy of a layer's parameters is current on a device model (see the class comment).
  enum class Current : std::uint8_t { kBoth, kHost, kDevice };

  // Declared first: destroyed last (layers and buffers hold pointers to it).
  std::unique_ptr<Backend> backend_;
  Shape input_shape_;
  std::size_t max_batch_;
  bool shapes_only_ = false;  // shapes_only(): nothing allocated that computes
  bool training_ = true;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::vector<std::size_t>> inputs_;  // by layer: the activations it takes
  std::vector<Shape> shapes_;                     // by activation: one sample's shape
  std::vector<Layout> layouts_;                   // by activation: how a batch of it lies
  std::vector<std::size_t> consumers_;            // by activation: the layers that take it
  std::vector<std::size_t> storage_;  // by activation: the one whose buffers hold it (fusion)
  std::vector<bool> fused_;           // by layer: a ReLU computed inside the layer before it
  std::vector<Buffer<float>> delta_scratch_;  // a graph that branches: a gradient to sum in
  std::vector<std::size_t> delta_writer_;     // by activation: 1 + the layer that wrote its delta
                                              // this pass (0: none yet)
  std::vector<const float*> sources_;         // a layer call's input pointers
  std::vector<float*> targets_;               // and its input-gradient pointers
  std::vector<std::size_t> offsets_;          // num_layers() + 1 entries
  Buffer<float> parameters_;                  // host: the compute buffer (CPU) or pinned staging
  Buffer<float> gradients_;                   // host, as parameters_
  Buffer<float> device_parameters_;           // device copies; empty on the CPU
  Buffer<float> device_gradients_;
  std::vector<Buffer<float>> activations_;  // backend memory: [0] input, [l + 1] output of layer l
  std::vector<Buffer<float>> deltas_;       // [l] d loss / d activations_[l]; [0] unused
  std::vector<Buffer<float>> host_activations_;      // device only: staging mirrors of activations_
  std::vector<Buffer<float>> host_deltas_;           // device only: staging mirrors of deltas_
  std::unique_ptr<std::atomic<Current>[]> current_;  // device only: by layer
  std::unique_ptr<Loss> loss_;     // a user's loss (register_loss); null: softmax cross-entropy
  std::size_t forward_batch_ = 0;  // batch of the last forward_layer(L - 1)
};

}  // namespace gradmesh::tasks
