#include "apps/recovery/resplit.h"

#include <cmath>
#include <string>

#include "engine/error.h"

namespace gradmesh::app {

std::uint64_t rescale_iteration(std::uint64_t done, std::uint64_t per_epoch_old,
                                std::uint64_t per_epoch_new) {
  GRADMESH_CHECK(per_epoch_old >= 1 && per_epoch_new >= 1, "rescale_iteration: empty epochs");
  const std::uint64_t epoch = done / per_epoch_old;
  const std::uint64_t in_epoch = done % per_epoch_old;
  // round(in_epoch * new / old) in integers
  const std::uint64_t scaled = (in_epoch * per_epoch_new * 2 + per_epoch_old) / (2 * per_epoch_old);
  return epoch * per_epoch_new + scaled;  // scaled == per_epoch_new: the next epoch's start
}

std::vector<float> merge_velocities(std::span<const std::vector<float>> velocities) {
  GRADMESH_CHECK(!velocities.empty(), "merge_velocities: no velocities");
  std::vector<float> out = velocities[0];
  for (std::size_t k = 1; k < velocities.size(); ++k) {
    GRADMESH_CHECK_EQ(velocities[k].size(), out.size(), "merge_velocities: sizes differ");
    const std::vector<float>& v = velocities[k];
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (std::abs(v[i]) > std::abs(out[i])) out[i] = v[i];
    }
  }
  return out;
}

Checkpoint resplit_checkpoint(std::span<const Checkpoint> old, std::size_t rank, std::size_t nodes,
                              const std::string& source, ResplitKind kind) {
  GRADMESH_CHECK(!old.empty(), "resplit_checkpoint: no checkpoints");
  const auto section = [&](std::size_t k,
                           const std::string& name) -> const std::vector<std::byte>& {
    const auto it = old[k].sections.find(name);
    if (it == old[k].sections.end()) {
      throw CheckpointError(source + ": rank " + std::to_string(k) + "'s checkpoint has no '" +
                            name + "' section");
    }
    return it->second;
  };
  Checkpoint out;
  out.header = old[0].header;
  out.header.rank = rank;
  out.header.nodes = nodes;
  const std::size_t own = rank < old.size() ? rank : 0;  // the old rank whose own state it takes
  if (kind == ResplitKind::kByReplica) {
    for (const auto& [name, bytes] : old[0].sections)
      out.sections[name] = section(name == "cursor" ? 0 : own, name);
    return out;
  }
  std::vector<std::vector<float>> velocities;
  for (std::size_t k = 0; k < old.size(); ++k) {
    engine::StateReader in(section(k, "optimizer"),
                           source + ", rank " + std::to_string(k) + ", section 'optimizer'");
    velocities.push_back(in.read_float_vector());
    in.expect_end();
  }
  engine::StateWriter optimizer;
  optimizer.write_floats(merge_velocities(velocities));
  out.sections["optimizer"].assign(optimizer.bytes().begin(), optimizer.bytes().end());
  for (const auto& [name, bytes] : old[0].sections) {
    if (name == "optimizer") continue;
    const bool pipelines = name == "model" || name == "cursor" || name == "sync";
    out.sections[name] = section(pipelines ? 0 : own, name);
  }
  return out;
}

}  // namespace gradmesh::app
