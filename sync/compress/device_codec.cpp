#include "sync/compress/device_codec.h"

#include <array>
#include <string>

#include "engine/error.h"

namespace gradmesh::sync::compress {

namespace {
const CompressorEntry& device_entry(std::string_view method) {
  const CompressorEntry& entry = compressor_entry(method);
  GRADMESH_CHECK(static_cast<bool>(entry.make_device),
                 "DeviceCodec: no device kernels for " + entry.name);
  return entry;
}
}  // namespace

DeviceCodec::DeviceCodec(tasks::Backend& backend, std::string_view method, std::size_t floats,
                         const CompressorParams& params, bool error_feedback)
    : backend_(backend),
      host_(method, floats, params, /*error_feedback=*/false),
      error_feedback_(error_feedback && !compressor_entry(method).traits.lossless),
      lossless_(compressor_entry(method).traits.lossless),
      kernels_(device_entry(method).make_device(backend, floats, params)) {
  p_ = backend_.allocate<float>(floats);
  wire_ = backend_.allocate<std::byte>(host_.encoded_bytes());
  norms_ = backend_.allocate<double>(3);
}

bool DeviceCodec::supports(std::string_view method) {
  const CompressorEntry* entry = find_compressor(method);
  return entry != nullptr && static_cast<bool>(entry->make_device);
}

EncodeStats DeviceCodec::encode(const float* gradient, std::span<std::byte> out,
                                std::uint64_t iteration) {
  GRADMESH_CHECK_EQ(out.size(), encoded_bytes(), "DeviceCodec::encode: output size");
  const std::size_t n = floats();
  float* p = p_.data();
  double* norms = norms_.data();
  std::byte* wire = wire_.data();
  if (error_feedback_) {
    backend_.sum_squares(gradient, n, norms);
    backend_.accumulate(p, gradient, n);
  } else if (n > 0) {
    backend_.copy(p, gradient, 4 * n);
  }
  backend_.sum_squares(p, n, norms + 1);
  kernels_->encode(p, wire, iteration);
  if (!lossless_) backend_.sum_squares(p, n, norms + 2);
  backend_.copy_to_host(out.data(), wire, out.size());  // waits for all of the above
  std::array<double, 3> figures{};
  backend_.copy_to_host(figures.data(), norms, sizeof(figures));
  EncodeStats stats;
  stats.input_norm2 = figures[1];
  stats.gradient_norm2 = error_feedback_ ? figures[0] : figures[1];
  stats.error_norm2 = lossless_ ? 0.0 : figures[2];
  return stats;
}

void DeviceCodec::decode_into(std::span<const std::byte> in, float* out, std::uint64_t iteration,
                              bool add) {
  host_.check(in);  // before anything is uploaded or written: a malformed message changes nothing
  std::byte* wire = wire_.data();
  if (!in.empty()) backend_.copy_to_device(wire, in.data(), in.size());
  kernels_->decode(wire, out, iteration, add);
  backend_.synchronize();  // `in` may go once this returns; the sum is complete
}

void DeviceCodec::decode(std::span<const std::byte> in, float* out, std::uint64_t iteration) {
  decode_into(in, out, iteration, false);
}

void DeviceCodec::decode_add(std::span<const std::byte> in, float* sum, std::uint64_t iteration) {
  decode_into(in, sum, iteration, true);
}

std::vector<float> DeviceCodec::residual() const {
  if (!error_feedback_) return {};
  std::vector<float> host(floats());
  if (!host.empty()) backend_.copy_to_host(host.data(), p_.data(), 4 * host.size());
  return host;
}

void DeviceCodec::save_state(engine::StateWriter& out) { out.write_floats(residual()); }

void DeviceCodec::load_state(engine::StateReader& in) {
  std::vector<float> host(error_feedback_ ? floats() : 0);
  in.read_floats(host);
  if (host.empty()) return;
  backend_.copy_to_device(p_.data(), host.data(), 4 * host.size());
  backend_.synchronize();  // `host` goes out of scope
}

}  // namespace gradmesh::sync::compress
