#pragma once
// What the tests of apps/recovery/ share: a temporary folder and a stateful object.

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/checkpoint.h"

namespace gradmesh::app::testing {

/// A temporary folder, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             ("gradmesh-recovery-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() { std::filesystem::remove_all(path); }
};

/// A counter and some weights: the state of a checkpoint section.
struct Counter final : engine::Checkpointable {
  std::uint64_t value = 0;
  std::vector<float> weights;
  void save_state(engine::StateWriter& out) override {
    out.write_u64(value);
    out.write_floats(weights);
  }
  void load_state(engine::StateReader& in) override {
    value = in.read_u64();
    in.read_floats(weights);
  }
};

/// A vector of floats alone: an optimizer's velocity, as tasks::Optimizer saves it.
struct Floats final : engine::Checkpointable {
  std::vector<float> values;
  void save_state(engine::StateWriter& out) override { out.write_floats(values); }
  void load_state(engine::StateReader& in) override { in.read_floats(values); }
};

}  // namespace gradmesh::app::testing
