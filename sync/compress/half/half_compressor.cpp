#include "sync/compress/half/half_compressor.h"

#include <algorithm>
#include <array>

#include "sync/compress/half/half_block.h"
#include "sync/compress/half/half_segment_codec.h"
#include "sync/compress/wire_bytes.h"
#include "tasks/backend.h"

namespace gradmesh::sync::compress {
namespace {

class HalfCompressor final : public Compressor {
 public:
  HalfCompressor(tasks::HalfFormat format, std::size_t floats)
      : Compressor(floats), format_(format) {}

  [[nodiscard]] std::string_view name() const noexcept override {
    return format_ == tasks::HalfFormat::kFp16 ? "fp16" : "bf16";
  }
  [[nodiscard]] std::size_t encoded_bytes() const noexcept override { return 2 * floats(); }

  EncodeStats encode(std::span<const float> in, std::span<std::byte> out, std::uint64_t,
                     float* error, double) override {
    // The block conversions (F16C where the CPU has it), a block at a time through a decoded
    // copy on the stack for the error.
    constexpr std::size_t kBlock = 1024;
    std::array<float, kBlock> sent;
    detail::Norm2 input2, error2;
    const std::size_t n = floats();
    for (std::size_t begin = 0; begin < n; begin += kBlock) {
      const std::size_t size = std::min(kBlock, n - begin);
      encode_half_block(format_, 1.0f, in.subspan(begin, size), out.data() + 2 * begin);
      decode_half_block(format_, 1.0f, out.data() + 2 * begin, std::span(sent.data(), size));
      for (std::size_t j = 0; j < size; ++j) {
        const std::size_t i = begin + j;
        const float v = in[i];
        const float e = v - sent[j];
        input2.add(i, v);
        error2.add(i, e);
        if (error != nullptr) error[i] = e;
      }
    }
    return {input2.total(), input2.total(), error2.total()};
  }
  void decode(std::span<const std::byte> in, std::span<float> out, std::uint64_t) const override {
    decode_half_block(format_, 1.0f, in.data(), out);
  }
  void decode_add(std::span<const std::byte> in, std::span<float> sum,
                  std::uint64_t) const override {
    decode_add_half_block(format_, 1.0f, in.data(), sum);
  }

 private:
  tasks::HalfFormat format_;
};

/// On a device: the backend's encode_half (p becomes its error, exact as on the host) and
/// decode_half.
class HalfDeviceKernels final : public DeviceKernels {
 public:
  HalfDeviceKernels(tasks::Backend& backend, tasks::HalfFormat format, std::size_t floats)
      : backend_(backend), format_(format), floats_(floats) {}
  void encode(float* p, std::byte* wire, std::uint64_t) override {
    backend_.encode_half(format_, p, floats_, reinterpret_cast<std::uint16_t*>(wire));
  }
  void decode(const std::byte* wire, float* out, std::uint64_t, bool add) override {
    backend_.decode_half(format_, reinterpret_cast<const std::uint16_t*>(wire), floats_, out, add);
  }

 private:
  tasks::Backend& backend_;
  tasks::HalfFormat format_;
  std::size_t floats_;
};

CompressorEntry half_entry(tasks::HalfFormat format, std::string name, std::string summary,
                           CompressorCost cost) {
  CompressorEntry entry{
      std::move(name),
      {.dense = true, .shared_indices = false, .exact_error = true},
      [format](std::size_t floats, const CompressorParams&) -> std::unique_ptr<Compressor> {
        return std::make_unique<HalfCompressor>(format, floats);
      },
      std::move(summary),
      [](std::size_t floats, const CompressorParams&) { return 2 * floats; },
      cost,
      {},
      &half_segment_codec(format)};
  entry.make_device = [format](tasks::Backend& backend, std::size_t floats,
                               const CompressorParams&) {
    return std::unique_ptr<DeviceKernels>(new HalfDeviceKernels(backend, format, floats));
  };
  return entry;
}

}  // namespace

CompressorEntry fp16_compressor() {
  return half_entry(tasks::HalfFormat::kFp16, "fp16",
                    "IEEE binary16, round to nearest even, saturated at +-65504 (2 bytes a float)",
                    // bench_codec_step (1M floats, 4 nodes), 4 runs of 7-9 on 2026-11-27: 2.7-3.6
                    // steps an encode, 0.17-0.28 a decode (F16C).
                    {.encode_steps = 2.8, .decode_steps = 0.25});
}

CompressorEntry bf16_compressor() {
  return half_entry(tasks::HalfFormat::kBf16, "bf16",
                    "bfloat16, round to nearest even (2 bytes a float)",
                    // bench_codec_step, the same runs: 2.6-6.0 steps an encode, 0.17-0.28 a decode.
                    {.encode_steps = 4.4, .decode_steps = 0.25});
}

}  // namespace gradmesh::sync::compress
