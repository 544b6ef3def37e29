#pragma once
// A compressor of one buffer of floats, whatever the buffer is (a layer's gradient, a bucket, a
// pseudo-gradient), and the registry the compressors register into (issue 56, item 1;
// docs/compression.md). Each compressor lives in its own folder, sync/compress/<name>/, and is
// added to the registry by one line of builtin_compressors.cpp; a pipeline registers its own
// through register_compressor. Error feedback is a wrapper around any compressor
// (error_feedback.h), not a flag inside one.
//
// The shape follows BytePS's compressor plug-ins (byteps/common/compressor/: a registry each
// compressor adds itself to, error feedback as a decorator around any compressor, the inner
// compressor writing its own error in the pass that encodes, BytePS's "fast update error").

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sync/collective/segment_codec.h"

namespace gradmesh::tasks {
class Backend;
}

namespace gradmesh::sync::compress {

/// What one encode did, for the metrics (issue 28: the relative compression error per layer).
struct EncodeStats {
  double gradient_norm2 = 0;  ///< ||g||^2, the gradient given
  double input_norm2 = 0;     ///< ||p||^2, p = g + e (the gradient with the earlier residual)
  double error_norm2 = 0;     ///< ||p - D(C(p))||^2: the compression error, and with error
                              ///< feedback the new residual's norm^2
};

/// What a compressor declares about itself; schemes and the planner read these, never its name.
struct CompressorTraits {
  /// Every entry is sent (fp16, int8): D(C(p)) has a value at every index. False for the
  /// sparsifiers (top-k, random-k), whose unsent entries decode to 0 and stay in the residual.
  bool dense = true;
  /// The indices sent depend on the iteration only, not on the values (random-k's shared seed):
  /// every node sends the same indices, and the encoding is those kept() entries as f32 values,
  /// so the nodes' encodings are summed entry by entry (a ring all-reduce of kept() floats).
  bool shared_indices = false;
  /// D(C(p)) + (p - D(C(p))) == p bit for bit, so error feedback loses nothing (codec.h's
  /// invariant); false where the error is itself rounded.
  bool exact_error = true;
  /// D(C(p)) == p: nothing is lost, so there is no residual to keep (the identity, "none").
  bool lossless = false;
};

/// A compressor's parameters from [sync.compression] (each compressor reads those it uses).
struct CompressorParams {
  double ratio = 0.01;     ///< sparsifiers: the share of entries kept, in (0, 1]
  std::uint64_t seed = 0;  ///< the job's seed, the same on every node (random-k's indices)
  /// The node's rank: what a node draws alone (stochastic rounding) comes from (seed, rank,
  /// iteration), so nodes round independently and a rerun draws the same.
  std::uint64_t rank = 0;
  std::int64_t bits = 8;  ///< quantizers: bits a value (qsgd: 2, 4 or 8)
};

/// Encodes and decodes one buffer of floats() floats (a fixed size, set at construction).
///
/// Sizes: encoded_bytes() is exact and fixed (a receiver checks it with check()). Memory: what a
/// compressor needs is allocated at construction; encode and decode allocate nothing.
/// Thread safety: encode() may mutate scratch (one owner at a time); check(), decode(),
/// decode_add() and mask_sent() are const and may run on any thread at once. Errors: check()
/// throws ProtocolError for bytes that are not an encoding of this compressor; decode(),
/// decode_add() and mask_sent() trust their input (a receiver checks first: Codec does).
class Compressor {
 public:
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;
  virtual ~Compressor() = default;

  /// The registry's name ("fp16").
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  [[nodiscard]] std::size_t floats() const noexcept { return floats_; }
  /// Entries sent: floats() for a dense compressor, k for a sparsifier.
  [[nodiscard]] virtual std::size_t kept() const noexcept { return floats_; }
  /// Bytes of one encoding.
  [[nodiscard]] virtual std::size_t encoded_bytes() const noexcept = 0;

  /// Writes C(`in`) (floats() floats) to `out` (encoded_bytes() bytes). When `error` is not null
  /// (floats() floats; it may be in.data() itself), writes in - D(C(in)) there in the same pass.
  /// `iteration` seeds what is drawn (random indices, stochastic rounding): every node must
  /// encode and decode one buffer's iteration t with the same t. `input_norm2`: ||in||^2 where
  /// the caller summed it in a pass of its own (error feedback does, as it forms p = g + e), else
  /// negative (a compressor that needs it then sums it). Returns ||in||^2 as both gradient_norm2
  /// and input_norm2, and ||in - D(C(in))||^2.
  virtual EncodeStats encode(std::span<const float> in, std::span<std::byte> out,
                             std::uint64_t iteration, float* error, double input_norm2) = 0;
  /// encode(in, out, iteration, error, -1): ||in||^2 not known.
  EncodeStats encode(std::span<const float> in, std::span<std::byte> out, std::uint64_t iteration,
                     float* error) {
    return encode(in, out, iteration, error, -1.0);
  }
  /// Throws ProtocolError when `in` is not an encoding of this compressor: a wrong size, and
  /// whatever else the format can check (top-k: indices in range and ascending). The default
  /// checks the size.
  virtual void check(std::span<const std::byte> in) const;
  /// Writes D(`in`) into `out` (floats() floats; unsent entries are set to 0).
  virtual void decode(std::span<const std::byte> in, std::span<float> out,
                      std::uint64_t iteration) const = 0;
  /// Adds D(`in`) into `sum` (floats() floats), in fp32.
  virtual void decode_add(std::span<const std::byte> in, std::span<float> sum,
                          std::uint64_t iteration) const = 0;
  /// Sets values[i] = 0 at every index the encoding `in` sent: DGC's momentum factor masking
  /// (Lin et al., ICLR'18, sec. 3.2). The default (a dense compressor) zeroes every entry.
  virtual void mask_sent(std::span<const std::byte> in, std::span<float> values,
                         std::uint64_t iteration) const;

 protected:
  explicit Compressor(std::size_t floats) noexcept : floats_(floats) {}

 private:
  std::size_t floats_;
};

/// A compressor that wraps another (a decorator, as BytePS's ErrorFeedback and momentum wrap
/// theirs): its name, sizes, check, decoding and masking are the inner compressor's; a decorator
/// overrides encode() to transform what the inner one encodes. Thread safety and errors: the inner
/// compressor's.
class CompressorDecorator : public Compressor {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return inner_->name(); }
  [[nodiscard]] std::size_t kept() const noexcept override { return inner_->kept(); }
  [[nodiscard]] std::size_t encoded_bytes() const noexcept override {
    return inner_->encoded_bytes();
  }
  void check(std::span<const std::byte> in) const override { inner_->check(in); }
  void decode(std::span<const std::byte> in, std::span<float> out,
              std::uint64_t iteration) const override {
    inner_->decode(in, out, iteration);
  }
  void decode_add(std::span<const std::byte> in, std::span<float> sum,
                  std::uint64_t iteration) const override {
    inner_->decode_add(in, sum, iteration);
  }
  void mask_sent(std::span<const std::byte> in, std::span<float> values,
                 std::uint64_t iteration) const override {
    inner_->mask_sent(in, values, iteration);
  }
  [[nodiscard]] const Compressor& inner() const noexcept { return *inner_; }

 protected:
  /// Throws ContractError for a null `inner`, naming `who`.
  CompressorDecorator(std::unique_ptr<Compressor> inner, std::string_view who);
  [[nodiscard]] Compressor& wrapped() noexcept { return *inner_; }

 private:
  std::unique_ptr<Compressor> inner_;
};

/// A compressor's encode and decode on a compute device, composed of the backend's gradient-codec
/// kernels (tasks/backend.h; the CUDA module implements them): they write the bytes the
/// compressor's host encode writes for the same floats, bit for bit, and leave the same error
/// (issue 28 item 1; issue 56: "a compressor's device kernels live in its folder too").
/// compress::DeviceCodec runs error feedback, the norms and the copies to and from the host around
/// them. Memory: what they need is allocated at construction. Thread safety: none (they drive one
/// backend from one thread). Errors: DeviceError from the backend.
class DeviceKernels {
 public:
  DeviceKernels() = default;
  DeviceKernels(const DeviceKernels&) = delete;
  DeviceKernels& operator=(const DeviceKernels&) = delete;
  virtual ~DeviceKernels() = default;
  /// Encodes `p` (device memory, the compressor's floats) into `wire` (device memory, its
  /// encoded bytes) and replaces p by its error p - D(C(p)) (a lossless compressor's may leave p
  /// as it is: its error is 0). `iteration` as the host encode's. Enqueued on the backend.
  virtual void encode(float* p, std::byte* wire, std::uint64_t iteration) = 0;
  /// Writes D(`wire`) into `out` (device memory, the compressor's floats), or adds it when `add`.
  /// `wire` was checked on the host first. Enqueued on the backend.
  virtual void decode(const std::byte* wire, float* out, std::uint64_t iteration, bool add) = 0;
};

/// k, the entries a sparsifier keeps of n floats at `ratio`: ceil(ratio n), at least 1 (for
/// n > 0) and at most n. Pure.
[[nodiscard]] std::size_t kept_entries(std::size_t floats, double ratio) noexcept;
/// Throws ConfigError naming sync.compression.ratio unless 0 < `ratio` <= 1.
void check_ratio(double ratio);
/// `share` in percent with 3 significant digits ("1%", "0.5%"), as plans print a ratio.
[[nodiscard]] std::string percent_text(double share);

/// What a compressor's passes cost a node's CPU where start-up did not measure them, in optimizer
/// steps a float of the buffer (topo::ClusterCost::step_seconds_per_float: the planner scales
/// them by the node's measured step), from bench/codec_step.cpp on this project's machine.
struct CompressorCost {
  double encode_steps = 1.0;  ///< one encode with error feedback
  double decode_steps = 0.3;  ///< one decode_add into a sum
};

/// One registered compressor.
struct CompressorEntry {
  using Make = std::function<std::unique_ptr<Compressor>(std::size_t floats,
                                                         const CompressorParams& params)>;
  using Size = std::function<std::size_t(std::size_t floats, const CompressorParams& params)>;
  std::string name;         ///< its name in configs and plans (sync.compression.method)
  CompressorTraits traits;  ///< what schemes and the planner may rely on
  Make make;                ///< builds one for a buffer of `floats` floats; throws ConfigError
                            ///< for parameters out of its range
  std::string summary;      ///< one line for errors and docs ("int8, a scale per 512 floats")
  /// Bytes of one encoding of `floats` floats, what make(floats, params)->encoded_bytes() gives,
  /// without building one (the planner prices layers with it). Pure.
  Size encoded_bytes;
  CompressorCost cost;  ///< the planner's price of its passes before start-up measures them
  /// How plans and logs name it on a layer ("top-k 1%", "qsgd 4-bit"); empty: the name.
  std::function<std::string(const CompressorParams&)> describe;
  /// A stateless format a ring all-reduce can sum segment by segment (decoding, adding in fp32,
  /// re-encoding at each hop; issue 56: the collectives take a wire format): fp16 and bf16 with
  /// a scale per segment. Null: the compressor's encodings are gathered (sparse_scheme.h). A
  /// process-wide object, never freed.
  const collective::SegmentCodec* segment = nullptr;
  using MakeDevice = std::function<std::unique_ptr<DeviceKernels>(
      tasks::Backend& backend, std::size_t floats, const CompressorParams& params)>;
  /// Its passes on a compute device for a buffer of `floats` floats there (throws DeviceError
  /// where the backend has no codec kernels). Empty: none; a scheme on a device model then
  /// encodes the host copy on the host.
  MakeDevice make_device;
};

/// The scheme id of uncompressed scheme `base` (topo/scheme_model.h) with registered compressor
/// `method`: "<base>_<method>" ("ps_int8", "sfb_fp16", "allreduce_bf16"). Pure.
[[nodiscard]] std::string compressed_scheme_id(std::string_view base, std::string_view method);

/// The segment format of registered compressor `method` (CompressorEntry::segment). Throws
/// ConfigError for an unregistered name, ContractError naming `who` for a compressor without one.
[[nodiscard]] const collective::SegmentCodec& segment_format(std::string_view method,
                                                             std::string_view who);

/// Adds `entry` to the registry: a program's own compressor (apps/examples/custom_pipeline), as a
/// DDP user registers a comm hook. Register before the first job config is read and the first
/// node built: the config's sync.compression.method, the planner's schemes and the transport's
/// lanes are taken from the registry then. Thread-safe. Throws ContractError for an empty name,
/// factory or size, or a name already registered.
void register_compressor(CompressorEntry entry);

/// While one lives on the calling thread, sync.compression.method accepts any name, as if a
/// compressor of that name were registered: for a program that checks a job config on behalf of
/// another program that registers compressors of its own (gradmesh-launch with --node). Building
/// a scheme on it still needs it registered. Not copyable; nests.
class AcceptUnknownCompressors {
 public:
  AcceptUnknownCompressors() noexcept;
  ~AcceptUnknownCompressors();
  AcceptUnknownCompressors(const AcceptUnknownCompressors&) = delete;
  AcceptUnknownCompressors& operator=(const AcceptUnknownCompressors&) = delete;
  /// Whether one lives on the calling thread.
  [[nodiscard]] static bool active() noexcept;
};
/// The entry named `name`, or null. Thread-safe (entries are never removed).
[[nodiscard]] const CompressorEntry* find_compressor(std::string_view name);
/// The entry named `name`. Throws ConfigError naming `key` and the registered names.
[[nodiscard]] const CompressorEntry& compressor_entry(std::string_view name,
                                                      std::string_view key = "sync.compression");
/// The registered names in registration order (the built-in ones first).
[[nodiscard]] std::vector<std::string> compressor_names();
/// How plans name `entry` with `params` on a layer (CompressorEntry::describe, else its name).
[[nodiscard]] std::string describe_compressor(const CompressorEntry& entry,
                                              const CompressorParams& params);

/// A compressor named `name` for `floats` floats, wrapped in error feedback when
/// `error_feedback` (not for a lossless one: nothing is lost). Throws as compressor_entry and the
/// compressor's factory.
[[nodiscard]] std::unique_ptr<Compressor> make_compressor(std::string_view name, std::size_t floats,
                                                          const CompressorParams& params,
                                                          bool error_feedback);

}  // namespace gradmesh::sync::compress
