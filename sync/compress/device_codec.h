#pragma once
// A gradient codec whose gradient, residual and sums live in a compute device's memory (issue 28
// item 1: "each with its encode/decode on the compute backend (CPU; CUDA kernels too)"). It gives
// the bytes compress::Codec gives for the same gradients, bit for bit, and keeps the same
// residual, but runs on the backend's codec kernels (tasks/backend.h, "gradient codecs"): only the
// encoding crosses PCIe (2n bytes for fp16 instead of 4n, 8k for top-k), and the host's cores,
// which a 2-core node shares between the optimizer, the transport and the codec, do none of it.
//
// Encode, per iteration, with p the residual (error feedback) or a scratch copy of g (without):
//   p += g (accumulate) | p = g;  ||g||^2, ||p||^2            (sum_squares)
//   the compressor's DeviceKernels::encode(p) -> wire, p = p - D(wire) (each compressor's own, in
//   its folder: fp16/bf16 encode_half, int8 encode_int8, top-k top_k + gather_and_zero, random-k
//   random_k + gather_and_zero)
//   ||p||^2 (the error; with error feedback the new residual's), then one download of the wire.
// Decode: the bytes are checked on the host (Codec::check) before anything is uploaded, then one
// upload and the compressor's DeviceKernels::decode.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/checkpoint.h"
#include "sync/compress/codec.h"
#include "tasks/backend.h"

namespace gradmesh::sync::compress {

/// Codec's contract on device memory. Sizes, wire layout, residual and stats as Codec (codec.h):
/// encoded_bytes() is Codec's; the wire bytes and the residual are Codec's bit for bit; the
/// norms in EncodeStats are summed in another order (equal within rounding).
///
/// Memory: device buffers of n floats (residual or scratch), the encoding, and for top-k the
/// backend's sort scratch (about 16n bytes) — all allocated at construction; encode and decode
/// allocate nothing. Thread safety: none — it drives `backend` (one thread at a time, the Model's
/// thread). Errors: DeviceError from the backend (a failed kernel or copy; a backend without codec
/// kernels: the CPU's); decode() throws ProtocolError, writing nothing, as Codec::check.
class DeviceCodec final : public engine::Checkpointable {
 public:
  /// The registered compressor `method` with `params` (as Codec's constructor), on `backend`,
  /// which must outlive the codec. Throws ConfigError for an unknown name or parameters out of
  /// range, ContractError for a compressor without device kernels (supports()), DeviceError when
  /// the device cannot hold the buffers or has no codec kernels.
  DeviceCodec(tasks::Backend& backend, std::string_view method, std::size_t floats,
              const CompressorParams& params, bool error_feedback);

  /// The compressor's registered name.
  [[nodiscard]] std::string_view name() const noexcept { return host_.name(); }
  /// Whether registered compressor `method` has device kernels (CompressorEntry::make_device:
  /// none, fp16, bf16, int8, topk, randomk); another encodes on the host. Thread-safe.
  [[nodiscard]] static bool supports(std::string_view method);
  [[nodiscard]] std::size_t floats() const noexcept { return host_.floats(); }
  [[nodiscard]] std::size_t kept() const noexcept { return host_.kept(); }
  [[nodiscard]] bool error_feedback() const noexcept { return error_feedback_; }
  [[nodiscard]] std::size_t encoded_bytes() const noexcept { return host_.encoded_bytes(); }

  /// Encodes p = `gradient` (device memory, floats() floats) + residual into `out` (host memory,
  /// encoded_bytes()), keeping the residual with error feedback; returns once `out` holds it.
  EncodeStats encode(const float* gradient, std::span<std::byte> out, std::uint64_t iteration);
  /// Throws ProtocolError when `in` is not an encoding of this codec (Codec::check).
  void check(std::span<const std::byte> in) const { host_.check(in); }
  /// Writes D(`in`) (host bytes) into `out` (device memory, floats() floats).
  void decode(std::span<const std::byte> in, float* out, std::uint64_t iteration);
  /// Adds D(`in`) into `sum` (device memory, floats() floats).
  void decode_add(std::span<const std::byte> in, float* sum, std::uint64_t iteration);

  /// The residual, downloaded (floats() floats; empty without error feedback).
  [[nodiscard]] std::vector<float> residual() const;
  /// The residual, bit for bit, in Codec's checkpoint form (a Codec can load it, and back).
  void save_state(engine::StateWriter& out) override;
  /// Throws CheckpointError for a residual of another size.
  void load_state(engine::StateReader& in) override;

 private:
  void decode_into(std::span<const std::byte> in, float* out, std::uint64_t iteration, bool add);

  tasks::Backend& backend_;
  Codec host_;  // sizes, check(); never encodes (no residual of its own)
  bool error_feedback_;
  bool lossless_;                           // no error to sum
  std::unique_ptr<DeviceKernels> kernels_;  // the compressor's own (its folder)
  tasks::Buffer<float> p_;                  // the residual (error feedback) or encode's scratch
  tasks::Buffer<std::byte> wire_;           // one encoding, on the device
  tasks::Buffer<double> norms_;             // ||g||^2, ||p||^2, ||error||^2
};

}  // namespace gradmesh::sync::compress
