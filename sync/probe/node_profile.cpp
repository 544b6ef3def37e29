#include "sync/probe/node_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "engine/error.h"

namespace gradmesh::sync {

namespace probe {

namespace {

constexpr std::uint64_t kMaxProfileLayers = std::uint64_t{1} << 20;
constexpr std::size_t kProfileHeaderBytes = 3 * sizeof(std::uint64_t);

}  // namespace

// Why `profile` is not a well-formed profile of a job of `nodes` nodes; empty if it is.
std::string profile_problem(const NodeProfile& profile, std::size_t nodes) {
  std::ostringstream why;
  if (profile.alpha.size() != nodes || profile.bandwidth.size() != nodes) {
    why << "alpha and bandwidth need " << nodes << " entries, got " << profile.alpha.size()
        << " and " << profile.bandwidth.size();
  } else if (profile.forward_seconds.size() != profile.backward_seconds.size() ||
             profile.forward_seconds.size() != profile.backward_input_seconds.size()) {
    why << "forward, backward and backward-without-dW times differ in size: "
        << profile.forward_seconds.size() << ", " << profile.backward_seconds.size() << " and "
        << profile.backward_input_seconds.size();
  } else if (profile.encode_seconds.size() != profile.decode_seconds.size() ||
             (!profile.encode_seconds.empty() &&
              profile.encode_seconds.size() != profile.forward_seconds.size())) {
    why << "encode and decode times need 0 or " << profile.forward_seconds.size()
        << " entries, got " << profile.encode_seconds.size() << " and "
        << profile.decode_seconds.size();
  } else {
    const auto bad = [](double x) { return !std::isfinite(x) || x < 0; };
    for (const auto* values :
         {&profile.alpha, &profile.bandwidth, &profile.forward_seconds, &profile.backward_seconds,
          &profile.backward_input_seconds, &profile.encode_seconds, &profile.decode_seconds}) {
      if (std::any_of(values->begin(), values->end(), bad)) {
        why << "a value is negative or not finite";
        break;
      }
    }
    if (why.tellp() == 0 && bad(profile.gemm_flops)) why << "gemm_flops = " << profile.gemm_flops;
    if (why.tellp() == 0 && bad(profile.message_seconds))
      why << "message_seconds = " << profile.message_seconds;
    if (why.tellp() == 0 && bad(profile.step_seconds_per_float))
      why << "step_seconds_per_float = " << profile.step_seconds_per_float;
    if (why.tellp() == 0 && bad(profile.cipher_seconds_per_byte))
      why << "cipher_seconds_per_byte = " << profile.cipher_seconds_per_byte;
    if (why.tellp() == 0 && bad(profile.half_encode_seconds_per_float))
      why << "half_encode_seconds_per_float = " << profile.half_encode_seconds_per_float;
    if (why.tellp() == 0 && bad(profile.half_decode_seconds_per_float))
      why << "half_decode_seconds_per_float = " << profile.half_decode_seconds_per_float;
    if (why.tellp() == 0 && bad(profile.transport_seconds_per_byte))
      why << "transport_seconds_per_byte = " << profile.transport_seconds_per_byte;
  }
  return why.str();
}

net::Payload encode_profile(const NodeProfile& profile) {
  const std::uint64_t header[3] = {profile.alpha.size(), profile.forward_seconds.size(),
                                   profile.encode_seconds.size()};
  std::vector<double> values;
  values.push_back(profile.gemm_flops);
  values.push_back(profile.message_seconds);
  values.push_back(profile.step_seconds_per_float);
  values.push_back(profile.cipher_seconds_per_byte);
  values.push_back(profile.half_encode_seconds_per_float);
  values.push_back(profile.half_decode_seconds_per_float);
  values.push_back(profile.transport_seconds_per_byte);
  for (const auto* part :
       {&profile.alpha, &profile.bandwidth, &profile.forward_seconds, &profile.backward_seconds,
        &profile.backward_input_seconds, &profile.encode_seconds, &profile.decode_seconds}) {
    values.insert(values.end(), part->begin(), part->end());
  }
  net::Payload payload = net::Payload::allocate(sizeof(header) + values.size() * sizeof(double));
  std::byte* out = payload.mutable_bytes().data();
  std::memcpy(out, header, sizeof(header));
  std::memcpy(out + sizeof(header), values.data(), values.size() * sizeof(double));
  return payload;
}

// The profile in `bytes`, or why it is malformed.
std::optional<NodeProfile> decode_profile(std::span<const std::byte> bytes, std::size_t nodes,
                                          std::string& why) {
  if (bytes.size() < kProfileHeaderBytes) {
    why = "profile of " + std::to_string(bytes.size()) + " bytes, shorter than its header";
    return std::nullopt;
  }
  std::uint64_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  if (header[0] != nodes || header[1] > kMaxProfileLayers ||
      (header[2] != 0 && header[2] != header[1])) {
    why = "profile of " + std::to_string(header[0]) + " nodes, " + std::to_string(header[1]) +
          " layers and codec times of " + std::to_string(header[2]) + ", expected " +
          std::to_string(nodes) + " nodes and codec times of 0 or every layer";
    return std::nullopt;
  }
  const std::uint64_t doubles = 7 + 2 * header[0] + 3 * header[1] + 2 * header[2];
  if (bytes.size() != kProfileHeaderBytes + doubles * sizeof(double)) {
    why = "profile of " + std::to_string(bytes.size()) + " bytes, expected " +
          std::to_string(kProfileHeaderBytes + doubles * sizeof(double));
    return std::nullopt;
  }
  std::vector<double> values(doubles);
  std::memcpy(values.data(), bytes.data() + kProfileHeaderBytes, doubles * sizeof(double));
  NodeProfile profile;
  auto at = values.begin();
  profile.gemm_flops = *at++;
  profile.message_seconds = *at++;
  profile.step_seconds_per_float = *at++;
  profile.cipher_seconds_per_byte = *at++;
  profile.half_encode_seconds_per_float = *at++;
  profile.half_decode_seconds_per_float = *at++;
  profile.transport_seconds_per_byte = *at++;
  const auto take = [&at](std::vector<double>& part, std::uint64_t count) {
    part.assign(at, at + static_cast<std::ptrdiff_t>(count));
    at += static_cast<std::ptrdiff_t>(count);
  };
  take(profile.alpha, header[0]);
  take(profile.bandwidth, header[0]);
  take(profile.forward_seconds, header[1]);
  take(profile.backward_seconds, header[1]);
  take(profile.backward_input_seconds, header[1]);
  take(profile.encode_seconds, header[2]);
  take(profile.decode_seconds, header[2]);
  why = profile_problem(profile, nodes);
  if (!why.empty()) return std::nullopt;
  return profile;
}

}  // namespace probe

JobMeasurements combine(const std::vector<NodeProfile>& profiles) {
  GRADMESH_CHECK(!profiles.empty(), "combine(): no profiles");
  const std::size_t n = profiles.size();
  const std::size_t layers = profiles.front().forward_seconds.size();
  for (const NodeProfile& p : profiles) {
    GRADMESH_CHECK_EQ(p.alpha.size(), n, "combine(): alpha entries vs nodes");
    GRADMESH_CHECK_EQ(p.bandwidth.size(), n, "combine(): bandwidth entries vs nodes");
    GRADMESH_CHECK_EQ(p.forward_seconds.size(), layers, "combine(): forward times vs layers");
    GRADMESH_CHECK_EQ(p.backward_seconds.size(), layers, "combine(): backward times vs layers");
    GRADMESH_CHECK_EQ(p.backward_input_seconds.size(), layers,
                      "combine(): backward times without dW vs layers");
    GRADMESH_CHECK_EQ(p.decode_seconds.size(), p.encode_seconds.size(),
                      "combine(): decode times vs encode times");
    GRADMESH_CHECK(p.encode_seconds.empty() || p.encode_seconds.size() == layers,
                   "combine(): encode times of " + std::to_string(p.encode_seconds.size()) +
                       " layers, expected 0 or " + std::to_string(layers));
  }
  JobMeasurements job;
  job.links.nodes = n;
  job.links.alpha.assign(n * n, 0.0);
  job.links.bandwidth.assign(n * n, 0.0);
  job.links.message_seconds.assign(n, 0.0);
  for (std::size_t from = 0; from < n; ++from) {
    job.links.message_seconds[from] = profiles[from].message_seconds;
    for (std::size_t to = 0; to < n; ++to) {
      if (from == to) continue;
      job.links.alpha[from * n + to] = profiles[from].alpha[to];
      job.links.bandwidth[from * n + to] = profiles[from].bandwidth[to];
    }
  }
  job.forward_seconds.assign(layers, 0.0);
  job.backward_seconds.assign(layers, 0.0);
  job.backward_input_seconds.assign(layers, 0.0);
  job.gemm_flops = profiles.front().gemm_flops;
  for (const NodeProfile& p : profiles) {
    for (std::size_t l = 0; l < layers; ++l) {
      job.forward_seconds[l] = std::max(job.forward_seconds[l], p.forward_seconds[l]);
      job.backward_seconds[l] = std::max(job.backward_seconds[l], p.backward_seconds[l]);
      job.backward_input_seconds[l] =
          std::max(job.backward_input_seconds[l], p.backward_input_seconds[l]);
    }
    job.gemm_flops = std::min(job.gemm_flops, p.gemm_flops);
    job.step_seconds_per_float = std::max(job.step_seconds_per_float, p.step_seconds_per_float);
    job.cipher_seconds_per_byte = std::max(job.cipher_seconds_per_byte, p.cipher_seconds_per_byte);
    job.half_encode_seconds_per_float =
        std::max(job.half_encode_seconds_per_float, p.half_encode_seconds_per_float);
    job.half_decode_seconds_per_float =
        std::max(job.half_decode_seconds_per_float, p.half_decode_seconds_per_float);
    job.transport_seconds_per_byte =
        std::max(job.transport_seconds_per_byte, p.transport_seconds_per_byte);
    if (p.encode_seconds.empty()) continue;
    job.encode_seconds.resize(layers, 0.0);
    job.decode_seconds.resize(layers, 0.0);
    for (std::size_t l = 0; l < layers; ++l) {
      job.encode_seconds[l] = std::max(job.encode_seconds[l], p.encode_seconds[l]);
      job.decode_seconds[l] = std::max(job.decode_seconds[l], p.decode_seconds[l]);
    }
  }
  return job;
}

}  // namespace gradmesh::sync
