#pragma once
// KV chunks and their owners: how a model's parameters are spread over the KV shards colocated on
// every node (Poseidon ATC'17 sec. 4.1, "KV Store": fixed-size KV pairs "so as to partition and
// distribute model parameters to server nodes as equally as possible").

#include <cstddef>
#include <span>
#include <vector>

namespace gradmesh::topo {

/// A contiguous block of parameters to place, e.g. one layer's [W | b], in floats.
struct ParameterBlock {
  std::size_t layer = 0;   ///< the layer's index in the model
  std::size_t offset = 0;  ///< first float of the block in the model's flat parameter vector
  std::size_t size = 0;    ///< floats
};

/// One KV chunk (Poseidon's "KV pair"): a slice of one layer's parameters, owned by one node.
struct KvChunk {
  std::size_t id = 0;  ///< index in KvPlacement::chunks()
  std::size_t layer = 0;
  std::size_t offset = 0;  ///< first float in the model's flat parameter vector
  std::size_t size = 0;    ///< floats (<= chunk size; the last chunk of a layer may be shorter)
  std::size_t owner = 0;   ///< rank whose KV shard holds the master copy
};

/// Splits parameter blocks into chunks of at most `chunk_floats` floats (never across blocks) and
/// assigns each chunk to the node with the least load so far (ties to the lowest rank), in block
/// order. Every node computes the same placement from the same inputs, so no coordination is
/// needed. Load imbalance is at most one chunk: max load <= mean + chunk_floats.
///
/// Thread safety: immutable after construction.
class KvPlacement {
 public:
  /// Throws ContractError if nodes == 0 or chunk_floats == 0.
  KvPlacement(std::span<const ParameterBlock> blocks, std::size_t nodes, std::size_t chunk_floats);

  /// The default chunk size in floats for a model of `total_floats` on `nodes` nodes: about 32
  /// chunks per node (so the most loaded node owns at most ~1/32 more than the mean), rounded up to
  /// 64 floats, at least 256 floats and at most Poseidon's 2 MB KV pair (524,288 floats).
  [[nodiscard]] static std::size_t auto_chunk_floats(std::size_t total_floats, std::size_t nodes);

  [[nodiscard]] const std::vector<KvChunk>& chunks() const noexcept { return chunks_; }
  /// Ids of the chunks of `layer` (empty for a layer without parameters).
  [[nodiscard]] std::span<const std::size_t> chunks_of_layer(std::size_t layer) const;
  /// Ids of the chunks owned by `rank`.
  [[nodiscard]] std::span<const std::size_t> chunks_owned_by(std::size_t rank) const;
  /// Floats owned by `rank`.
  [[nodiscard]] std::size_t load(std::size_t rank) const { return load_.at(rank); }
  /// max load / mean load (1.0 = perfect balance).
  [[nodiscard]] double imbalance() const noexcept;
  [[nodiscard]] std::size_t nodes() const noexcept { return load_.size(); }
  [[nodiscard]] std::size_t chunk_floats() const noexcept { return chunk_floats_; }

 private:
  std::size_t chunk_floats_;
  std::vector<KvChunk> chunks_;
  std::vector<std::vector<std::size_t>> by_layer_;
  std::vector<std::vector<std::size_t>> by_owner_;
  std::vector<std::size_t> load_;
};

}  // namespace gradmesh::topo
