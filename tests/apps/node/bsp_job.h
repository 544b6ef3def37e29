#pragma once
// The BSP end-to-end tests' job: a Fashion-MNIST MLP run by gradmesh-node processes, as TOML
// (shared by ps_training_test.cpp, bsp_failure_test.cpp and bsp_config_error_test.cpp).

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace gradmesh::testing {

/// Where the Fashion-MNIST files are installed (scripts/setup.sh).
inline constexpr const char* kData = "/usr/share/datasets/fashion-mnist";

inline const std::vector<std::string> kDemoSpecs = {
    "dense:256", "relu", "dense:256", "relu", "dense:10", "softmax_cross_entropy"};

struct Job {
  std::size_t batch = 16;
  double lr = 0.05, momentum = 0.9, weight_decay = 1e-4;
  std::uint64_t seed = 7;
  std::size_t iterations = 20;
  std::vector<std::string> layers = kDemoSpecs;
  std::string schedule = "constant";  // optimizer.schedule
  bool standardize = false;           // data.normalize = "standardize"
};

inline std::string toml_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", \"" : "\"") + items[i] + "\"";
  return out + "]";
}

/// The job as a config for `strategy` (one epoch capped at job.iterations).
inline std::string config_text(const Job& job, const std::string& strategy) {
  std::ostringstream out;
  out << "[job]\nname = \"equivalence\"\nseed = " << job.seed
      << "\nepochs = 1\nmax_iterations = " << job.iterations << "\n[data]\npath = \"" << kData
      << "\"\nnormalize = \"" << (job.standardize ? "standardize" : "none")
      << "\"\n[model]\nlayers = " << toml_list(job.layers) << "\n[optimizer]\nlr = " << job.lr
      << "\nmomentum = " << job.momentum << "\nweight_decay = " << job.weight_decay
      << "\nbatch_size = " << job.batch << "\nschedule = \"" << job.schedule << "\""
      << "\n[sync]\nstrategy = \"" << strategy << "\"\n[net]\nconnect_timeout = 20.0\n";
  return out.str();
}

}  // namespace gradmesh::testing
