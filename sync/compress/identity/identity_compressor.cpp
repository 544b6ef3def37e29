#include "sync/compress/identity/identity_compressor.h"

#include <algorithm>
#include <cstring>

#include "sync/compress/wire_bytes.h"
#include "tasks/backend.h"

namespace gradmesh::sync::compress {
namespace {

class IdentityCompressor final : public Compressor {
 public:
  explicit IdentityCompressor(std::size_t floats) : Compressor(floats) {}

  [[nodiscard]] std::string_view name() const noexcept override { return "none"; }
  [[nodiscard]] std::size_t encoded_bytes() const noexcept override { return 4 * floats(); }

  EncodeStats encode(std::span<const float> in, std::span<std::byte> out, std::uint64_t,
                     float* error, double) override {
    detail::Norm2 input2;
    for (std::size_t i = 0; i < in.size(); ++i) input2.add(i, in[i]);
    if (!in.empty()) std::memcpy(out.data(), in.data(), 4 * in.size());
    if (error != nullptr) std::fill(error, error + in.size(), 0.0f);
    return {input2.total(), input2.total(), 0.0};
  }
  void decode(std::span<const std::byte> in, std::span<float> out, std::uint64_t) const override {
    if (!out.empty()) std::memcpy(out.data(), in.data(), 4 * out.size());
  }
  void decode_add(std::span<const std::byte> in, std::span<float> sum,
                  std::uint64_t) const override {
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += detail::load<float>(in.data() + 4 * i);
  }
};

/// On a device: the floats copied to the wire and back (added into a sum).
class IdentityDeviceKernels final : public DeviceKernels {
 public:
  IdentityDeviceKernels(tasks::Backend& backend, std::size_t floats)
      : backend_(backend), floats_(floats) {}
  void encode(float* p, std::byte* wire, std::uint64_t) override {
    if (floats_ > 0) backend_.copy(wire, p, 4 * floats_);
  }
  void decode(const std::byte* wire, float* out, std::uint64_t, bool add) override {
    if (add) {
      backend_.accumulate(out, reinterpret_cast<const float*>(wire), floats_);
    } else if (floats_ > 0) {
      backend_.copy(out, wire, 4 * floats_);
    }
  }

 private:
  tasks::Backend& backend_;
  std::size_t floats_;
};

}  // namespace

CompressorEntry identity_compressor() {
  CompressorEntry entry{
      "none",
      {.dense = true, .shared_indices = false, .exact_error = true, .lossless = true},
      [](std::size_t floats, const CompressorParams&) -> std::unique_ptr<Compressor> {
        return std::make_unique<IdentityCompressor>(floats);
      },
      "the floats themselves (4 bytes a float)",
      [](std::size_t floats, const CompressorParams&) { return 4 * floats; },
      {.encode_steps = 0.5, .decode_steps = 0.25}};
  entry.make_device = [](tasks::Backend& backend, std::size_t floats, const CompressorParams&) {
    return std::unique_ptr<DeviceKernels>(new IdentityDeviceKernels(backend, floats));
  };
  return entry;
}

}  // namespace gradmesh::sync::compress
