#pragma once
// A small job config for end-to-end tests that run real nodes: an MLP 784-32-10 on the
// Fashion-MNIST files scripts/setup.sh installs, strategy ps, batch 32 per node, no start-up
// probe. Keys as dotted TOML keys, so a test appends the ones it needs ("job.epochs = 2").

#include <string>
#include <vector>

namespace gradmesh::testing {

inline std::string small_job_toml(const std::string& name, const std::vector<std::string>& extra) {
  std::string toml = "job.name = \"" + name + "\"\n" +
                     "data.path = \"/usr/share/datasets/fashion-mnist\"\n"
                     "model.layers = [\"dense:32\", \"relu\", \"dense:10\", "
                     "\"softmax_cross_entropy\"]\n"
                     "optimizer.batch_size = 32\n"
                     "sync.strategy = \"ps\"\n"
                     "planner.probe = false\n"
                     "net.connect_timeout = 20.0\n";
  for (const std::string& line : extra) toml += line + "\n";
  return toml;
}

}  // namespace gradmesh::testing
