#include "sync/compress/device_codec.h"

#include <array>

#include "engine/error.h"
#include "tasks/random.h"

namespace gradmesh::sync::compress {

DeviceCodec::DeviceCodec(tasks::Backend& backend, CodecKind kind, std::size_t floats, double ratio,
                         bool error_feedback, std::uint64_t seed)
    : backend_(backend),
      kind_(kind),
      host_(kind, floats, ratio, /*error_feedback=*/false, seed),
      error_feedback_(error_feedback && kind != CodecKind::kNone),
      seed_(seed) {
  if (kind != CodecKind::kNone) p_ = backend_.allocate<float>(floats);
  wire_ = backend_.allocate<std::byte>(host_.encoded_bytes());
  if (kind == CodecKind::kRandomK) indices_ = backend_.allocate<std::uint32_t>(host_.kept());
  if (kind == CodecKind::kTopK) {
    scratch_ = backend_.allocate<std::byte>(backend_.top_k_scratch_bytes(floats));
  }
  norms_ = backend_.allocate<double>(3);
}

namespace {
CodecKind device_kind(std::string_view method) {
  GRADMESH_CHECK(DeviceCodec::supports(method),
                 "DeviceCodec: no device kernels for " + std::string(method));
  return parse_codec_kind(method);
}
}  // namespace

DeviceCodec::DeviceCodec(tasks::Backend& backend, std::string_view method, std::size_t floats,
                         const CompressorParams& params, bool error_feedback)
    : DeviceCodec(backend, device_kind(method), floats, params.ratio, error_feedback, params.seed) {
}

bool DeviceCodec::supports(std::string_view method) noexcept {
  for (const CodecKind kind : {CodecKind::kNone, CodecKind::kFp16, CodecKind::kBf16,
                               CodecKind::kInt8, CodecKind::kTopK, CodecKind::kRandomK}) {
    if (codec_name(kind) == method) return true;
  }
  return false;
}

EncodeStats DeviceCodec::encode(const float* gradient, std::span<std::byte> out,
                                std::uint64_t iteration) {
  GRADMESH_CHECK_EQ(out.size(), encoded_bytes(), "DeviceCodec::encode: output size");
  const std::size_t n = floats(), k = kept();
  float* p = p_.data();
  double* norms = norms_.data();
  std::byte* wire = wire_.data();
  if (error_feedback_) {
    backend_.sum_squares(gradient, n, norms);
    backend_.accumulate(p, gradient, n);
  } else if (p != nullptr) {
    backend_.copy(p, gradient, 4 * n);
  }
  backend_.sum_squares(p != nullptr ? p : gradient, n, norms + 1);
  switch (kind()) {
    case CodecKind::kNone:
      if (n > 0) backend_.copy(wire, gradient, 4 * n);
      break;
    case CodecKind::kFp16:
    case CodecKind::kBf16:
      backend_.encode_half(
          kind() == CodecKind::kFp16 ? tasks::HalfFormat::kFp16 : tasks::HalfFormat::kBf16, p, n,
          reinterpret_cast<std::uint16_t*>(wire));
      break;
    case CodecKind::kInt8: {
      const std::size_t chunks = (n + kInt8ChunkFloats - 1) / kInt8ChunkFloats;
      backend_.encode_int8(p, n, kInt8ChunkFloats, reinterpret_cast<float*>(wire),
                           reinterpret_cast<std::int8_t*>(wire + 4 * chunks));
      break;
    }
    case CodecKind::kTopK: {
      auto* indices = reinterpret_cast<std::uint32_t*>(wire);
      backend_.top_k(p, n, k, indices, scratch_.data());
      backend_.gather_and_zero(p, indices, k, reinterpret_cast<float*>(wire + 4 * k));
      break;
    }
    case CodecKind::kRandomK:
      backend_.random_k(tasks::derive_seed(seed_, iteration), n, k, indices_.data());
      backend_.gather_and_zero(p, indices_.data(), k, reinterpret_cast<float*>(wire));
      break;
  }
  if (p != nullptr) backend_.sum_squares(p, n, norms + 2);
  backend_.copy_to_host(out.data(), wire, out.size());  // waits for all of the above
  std::array<double, 3> figures{};
  backend_.copy_to_host(figures.data(), norms, sizeof(figures));
  EncodeStats stats;
  stats.input_norm2 = figures[1];
  stats.gradient_norm2 = error_feedback_ ? figures[0] : figures[1];
  stats.error_norm2 = p != nullptr ? figures[2] : 0.0;
  return stats;
}

void DeviceCodec::decode_into(std::span<const std::byte> in, float* out, std::uint64_t iteration,
                              bool add) {
  host_.check(in);  // before anything is uploaded or written: a malformed message changes nothing
  const std::size_t n = floats(), k = kept();
  std::byte* wire = wire_.data();
  if (!in.empty()) backend_.copy_to_device(wire, in.data(), in.size());
  switch (kind()) {
    case CodecKind::kNone:
      if (add) {
        backend_.accumulate(out, reinterpret_cast<const float*>(wire), n);
      } else if (n > 0) {
        backend_.copy(out, wire, 4 * n);
      }
      break;
    case CodecKind::kFp16:
    case CodecKind::kBf16:
      backend_.decode_half(
          kind() == CodecKind::kFp16 ? tasks::HalfFormat::kFp16 : tasks::HalfFormat::kBf16,
          reinterpret_cast<const std::uint16_t*>(wire), n, out, add);
      break;
    case CodecKind::kInt8: {
      const std::size_t chunks = (n + kInt8ChunkFloats - 1) / kInt8ChunkFloats;
      backend_.decode_int8(reinterpret_cast<const float*>(wire),
                           reinterpret_cast<const std::int8_t*>(wire + 4 * chunks), n,
                           kInt8ChunkFloats, out, add);
      break;
    }
    case CodecKind::kTopK:
      if (!add) backend_.fill(out, n, 0.0f);
      backend_.scatter_add(reinterpret_cast<const std::uint32_t*>(wire),
                           reinterpret_cast<const float*>(wire + 4 * k), k, out);
      break;
    case CodecKind::kRandomK:
      if (!add) backend_.fill(out, n, 0.0f);
      backend_.random_k(tasks::derive_seed(seed_, iteration), n, k, indices_.data());
      backend_.scatter_add(indices_.data(), reinterpret_cast<const float*>(wire), k, out);
      break;
  }
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
