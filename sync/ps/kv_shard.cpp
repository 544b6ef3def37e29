#include "sync/ps/kv_shard.h"

#include <algorithm>
#include <limits>

#include "engine/error.h"

namespace gradmesh::sync {

namespace {
constexpr std::size_t kNotOwned = std::numeric_limits<std::size_t>::max();
// ChunkState::arrived, by rank.
constexpr std::uint8_t kNotYet = 0, kFloats = 1, kCoded = 2;
}  // namespace

KvShard::KvShard(const topo::KvPlacement& placement, std::size_t rank,
                 std::span<const float> initial, tasks::Optimizer& optimizer, std::string_view wire)
    : placement_(placement),
      rank_(rank),
      nodes_(placement.nodes()),
      optimizer_(optimizer),
      local_index_(placement.chunks().size(), kNotOwned) {
  const auto owned = placement.chunks_owned_by(rank);
  states_ = std::make_unique<ChunkState[]>(owned.size());
  master_.resize(placement.load(rank));
  scratch_.assign(master_.size(), 0.0f);
  std::size_t offset = 0;
  for (std::size_t i = 0; i < owned.size(); ++i) {
    const topo::KvChunk& chunk = placement.chunks()[owned[i]];
    GRADMESH_CHECK_LE(chunk.offset + chunk.size, initial.size(), "KV chunk outside the model");
    local_index_[chunk.id] = i;
    ChunkState& state = states_[i];
    state.offset = offset;
    state.model_offset = chunk.offset;
    state.size = chunk.size;
    state.pushes.resize(nodes_);
    state.views.resize(nodes_);
    state.arrived.assign(nodes_, kNotYet);
    if (wire != "none")
      decoders_.emplace_back(wire, chunk.size, compress::CompressorParams{}, false);
    std::copy_n(initial.begin() + static_cast<std::ptrdiff_t>(chunk.offset), chunk.size,
                master_.begin() + static_cast<std::ptrdiff_t>(offset));
    offset += chunk.size;
  }
}

void KvShard::reload(std::span<const float> parameters) {
  // Only a chunk's owner steps it, so this node's velocity of the chunks it does not own is 0;
  // a checkpoint merged from another node count (apps/recovery/resplit.h) carries the owners'
  // values everywhere: back to 0, so the next merge again finds each chunk's velocity at its owner.
  const std::span<float> velocity = optimizer_.velocity();
  for (const topo::KvChunk& chunk : placement_.chunks()) {
    if (chunk.owner == rank_) continue;
    GRADMESH_CHECK_LE(chunk.offset + chunk.size, velocity.size(),
                      "KvShard::reload: KV chunk outside the model");
    std::fill_n(velocity.begin() + static_cast<std::ptrdiff_t>(chunk.offset), chunk.size, 0.0f);
  }
  const std::size_t owned = placement_.chunks_owned_by(rank_).size();
  for (std::size_t i = 0; i < owned; ++i) {
    const ChunkState& state = states_[i];
    GRADMESH_CHECK_LE(state.model_offset + state.size, parameters.size(),
                      "KvShard::reload: KV chunk outside the model");
    std::copy_n(parameters.begin() + static_cast<std::ptrdiff_t>(state.model_offset), state.size,
                master_.begin() + static_cast<std::ptrdiff_t>(state.offset));
  }
}

KvShard::PushResult KvShard::store(std::size_t from, std::size_t chunk, std::uint64_t round,
                                   net::Payload gradient, bool coded, std::string* reason) {
  const auto reject = [&](std::string why) {
    if (reason != nullptr) *reason = std::move(why);
    return PushResult::kRejected;
  };
  if (chunk >= local_index_.size() || local_index_[chunk] == kNotOwned) {
    return reject("chunk " + std::to_string(chunk) + " is not owned by rank " +
                  std::to_string(rank_));
  }
  if (from >= nodes_) return reject("sender rank " + std::to_string(from) + " out of range");
  ChunkState& state = states_[local_index_[chunk]];
  if (coded) {
    if (decoders_.empty()) {
      return reject("chunk " + std::to_string(chunk) +
                    ": an encoded push, but this KV shard takes floats only");
    }
    try {
      decoders_[local_index_[chunk]].check(gradient.bytes());
    } catch (const ProtocolError& e) {
      return reject("chunk " + std::to_string(chunk) + " push: " + e.what());
    }
  } else if (gradient.size() != state.size * sizeof(float)) {
    return reject("chunk " + std::to_string(chunk) + " gradient has " +
                  std::to_string(gradient.size()) + " bytes, expected " +
                  std::to_string(state.size * sizeof(float)));
  }
  std::lock_guard lock(state.mutex);
  if (round != state.round) {
    return reject("chunk " + std::to_string(chunk) + " push for round " + std::to_string(round) +
                  " while collecting round " + std::to_string(state.round));
  }
  if (state.arrived[from] != kNotYet) {
    return reject("duplicate push of chunk " + std::to_string(chunk) + " from rank " +
                  std::to_string(from) + " in round " + std::to_string(round));
  }
  if (!coded) state.views[from] = gradient.as<float>();
  state.arrived[from] = coded ? kCoded : kFloats;
  state.any_coded = state.any_coded || coded;
  state.pushes[from] = std::move(gradient);
  return ++state.received == nodes_ ? PushResult::kReady : PushResult::kAccepted;
}

std::span<const float> KvShard::reduce(std::size_t chunk, bool* coded) {
  GRADMESH_CHECK(chunk < local_index_.size() && local_index_[chunk] != kNotOwned,
                 "reduce of a chunk this shard does not own");
  const std::size_t index = local_index_[chunk];
  ChunkState& state = states_[index];
  std::lock_guard lock(state.mutex);
  GRADMESH_CHECK_EQ(state.received, nodes_, "reduce before every push arrived");
  const auto at = static_cast<std::ptrdiff_t>(state.offset);
  const std::span<float> master(master_.data() + at, state.size);
  const std::span<float> scratch(scratch_.data() + at, state.size);
  const float scale = 1.0f / static_cast<float>(nodes_);
  if (!state.any_coded) {
    optimizer_.step_sum(state.model_offset, master, state.views, scale, scratch);
  } else {
    // The decodings summed in rank order into the scratch, scaled, stepped: what Sgd::step_sum
    // does over the decoded floats (the first written, the others added), bit for bit, without
    // a buffer of decodings to copy from.
    const std::span<float> sum = scratch;
    const compress::Codec& decoder = decoders_[index];
    for (std::size_t r = 0; r < nodes_; ++r) {
      const net::Payload& push = state.pushes[r];
      if (state.arrived[r] == kCoded) {
        if (r == 0) {
          decoder.decode(push.bytes(), sum, 0);
        } else {
          decoder.decode_add(push.bytes(), sum, 0);
        }
      } else {
        const std::span<const float> g = push.as<float>();
        if (r == 0) {
          std::copy(g.begin(), g.end(), sum.begin());
        } else {
          for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
        }
      }
    }
    for (float& s : sum) s *= scale;
    optimizer_.step(state.model_offset, master, sum);
  }
  if (coded != nullptr) *coded = state.any_coded;
  for (std::size_t r = 0; r < nodes_; ++r) {
    state.pushes[r] = net::Payload{};
    state.views[r] = {};
    state.arrived[r] = kNotYet;
  }
  state.any_coded = false;
  state.received = 0;
  ++state.round;
  return master;
}

}  // namespace gradmesh::sync
