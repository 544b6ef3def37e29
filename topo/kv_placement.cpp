#include "topo/kv_placement.h"

#include <algorithm>

#include "engine/error.h"

namespace gradmesh::topo {

KvPlacement::KvPlacement(std::span<const ParameterBlock> blocks, std::size_t nodes,
                         std::size_t chunk_floats)
    : chunk_floats_(chunk_floats), by_owner_(nodes), load_(nodes, 0) {
  GRADMESH_CHECK(nodes >= 1, "KvPlacement needs at least one node");
  GRADMESH_CHECK(chunk_floats >= 1, "KvPlacement needs a chunk size of at least one float");
  for (const ParameterBlock& block : blocks) {
    if (block.layer >= by_layer_.size()) by_layer_.resize(block.layer + 1);
    for (std::size_t begin = 0; begin < block.size; begin += chunk_floats) {
      const std::size_t size = std::min(chunk_floats, block.size - begin);
      const auto owner =
          static_cast<std::size_t>(std::min_element(load_.begin(), load_.end()) - load_.begin());
      const std::size_t id = chunks_.size();
      chunks_.push_back(KvChunk{id, block.layer, block.offset + begin, size, owner});
      load_[owner] += size;
      by_layer_[block.layer].push_back(id);
      by_owner_[owner].push_back(id);
    }
  }
}

std::size_t KvPlacement::auto_chunk_floats(std::size_t total_floats, std::size_t nodes) {
  constexpr std::size_t kChunksPerNode = 32;
  constexpr std::size_t kAlign = 64;
  constexpr std::size_t kMin = 256;
  constexpr std::size_t kMax = (2u << 20) / sizeof(float);  // Poseidon's 2 MB KV pair
  const std::size_t target = (total_floats + kChunksPerNode * nodes - 1) / (kChunksPerNode * nodes);
  const std::size_t aligned = (target + kAlign - 1) / kAlign * kAlign;
  return std::clamp(aligned, kMin, kMax);
}

std::span<const std::size_t> KvPlacement::chunks_of_layer(std::size_t layer) const {
  if (layer >= by_layer_.size()) return {};
  return by_layer_[layer];
}

std::span<const std::size_t> KvPlacement::chunks_owned_by(std::size_t rank) const {
  return by_owner_.at(rank);
}

double KvPlacement::imbalance() const noexcept {
  std::size_t total = 0;
  std::size_t most = 0;
  for (std::size_t l : load_) {
    total += l;
    most = std::max(most, l);
  }
  if (total == 0) return 1.0;
  return static_cast<double>(most) * static_cast<double>(load_.size()) / static_cast<double>(total);
}

}  // namespace gradmesh::topo
