#include "sync/compress/codec_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "sync/compress/device_codec.h"
#include "tasks/random.h"

namespace gradmesh::sync::compress {

namespace {

using Clock = std::chrono::steady_clock;

/// Calls `work(rep)` once untimed, then until `min_seconds` have passed (at least once); returns
/// the seconds of one call.
template <typename Work>
double time_calls(double min_seconds, Work&& work) {
  work(std::uint64_t{0});
  std::uint64_t reps = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    work(++reps);
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < min_seconds);
  return elapsed / static_cast<double>(reps);
}

}  // namespace

bool measures_codec(std::string_view method) {
  const CompressorEntry* entry = find_compressor(method);
  return entry != nullptr && !entry->traits.lossless;
}

CodecProfile profile_codec(std::string_view method, const CompressorParams& params,
                           std::span<const std::size_t> layer_floats, double min_seconds,
                           std::uint64_t seed, tasks::Backend* device) {
  const CompressorEntry& entry = compressor_entry(method);
  if (device != nullptr && (device->host_addressable() || !DeviceCodec::supports(entry.name))) {
    device = nullptr;
  }
  GRADMESH_CHECK(!entry.traits.lossless,
                 "profile_codec: no codec to measure (" + entry.name + " is lossless)");
  GRADMESH_CHECK(
      std::isfinite(min_seconds) && min_seconds >= 0,
      "profile_codec: min_seconds must be finite and >= 0, got " + std::to_string(min_seconds));
  std::size_t largest = 0;
  for (std::size_t floats : layer_floats) {
    largest = std::max(largest, std::min(floats, kMaxProfiledFloats));
  }
  tasks::SplitMix64 rng(seed);
  std::vector<float> gradient(largest), sum(largest, 0.0f);
  for (float& g : gradient) g = 2.0f * rng.next_float() - 1.0f;
  tasks::Buffer<float> on_device;
  if (device != nullptr && largest > 0) {
    on_device = device->allocate<float>(largest);
    device->copy_to_device(on_device.data(), gradient.data(), 4 * largest);
    device->synchronize();
  }

  CodecProfile profile;
  profile.encode_seconds.assign(layer_floats.size(), 0.0);
  profile.decode_seconds.assign(layer_floats.size(), 0.0);
  std::map<std::size_t, std::pair<double, double>> by_size;  // measured floats -> seconds
  for (std::size_t l = 0; l < layer_floats.size(); ++l) {
    if (layer_floats[l] == 0) continue;
    const std::size_t floats = std::min(layer_floats[l], kMaxProfiledFloats);
    auto it = by_size.find(floats);
    if (it == by_size.end()) {
      Codec codec(entry.name, floats, params, /*error_feedback=*/true);
      std::vector<std::byte> wire(codec.encoded_bytes());
      const std::span<const float> in(gradient.data(), floats);
      const std::span<float> out(sum.data(), floats);
      double encode = 0;
      if (device != nullptr) {
        DeviceCodec on(*device, entry.name, floats, params, /*error_feedback=*/true);
        encode = time_calls(
            min_seconds, [&](std::uint64_t rep) { (void)on.encode(on_device.data(), wire, rep); });
      } else {
        encode =
            time_calls(min_seconds, [&](std::uint64_t rep) { (void)codec.encode(in, wire, rep); });
      }
      // The last encode's bytes, decoded as its iteration (random-k draws the indices from it).
      std::uint64_t last = 0;
      (void)codec.encode(in, wire, last);
      const double decode =
          time_calls(min_seconds, [&](std::uint64_t) { codec.decode_add(wire, out, last); });
      it = by_size.emplace(floats, std::pair{encode, decode}).first;
    }
    const double scale = static_cast<double>(layer_floats[l]) / static_cast<double>(floats);
    profile.encode_seconds[l] = it->second.first * scale;
    profile.decode_seconds[l] = it->second.second * scale;
  }
  if (entry.segment != nullptr && largest > 0) {
    const collective::SegmentCodec& segment = *entry.segment;
    std::vector<std::byte> wire(segment.encoded_bytes(largest));
    const double floats = static_cast<double>(largest);
    profile.half_encode_seconds_per_float =
        time_calls(min_seconds, [&](std::uint64_t) { segment.encode(gradient, wire.data(), {}); }) /
        floats;
    profile.half_decode_seconds_per_float =
        time_calls(min_seconds, [&](std::uint64_t) { segment.decode_add(wire.data(), sum); }) /
        floats;
  }
  return profile;
}

}  // namespace gradmesh::sync::compress
