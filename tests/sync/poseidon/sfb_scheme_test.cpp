// Tests for sync/poseidon/sfb_scheme.h on the in-process transport, with the Model on the emulated
// device (tests/tasks/emulated_device.h) so the device-side update path runs on any machine: the
// SF rebuild on the device's GEMM, the step on the device, the layer's device copy current.

#include "sync/poseidon/sfb_scheme.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "tests/sync/support/inproc_cluster.h"
#include "tests/tasks/emulated_device.h"

using namespace gradmesh;
using gradmesh::tasks::testing::EmulatedDevice;

namespace {

constexpr std::uint64_t kIterations = 5;

/// Per node per iteration once every SFB layer is current on the device: uploaded bytes are the
/// batch and each SFB layer's stacked factors n K (M + N); downloaded bytes are this node's
/// factors K (M + N) (what sfb_send ships). No parameter or M x N gradient crosses.
struct Traffic {
  std::size_t uploaded = 0, downloaded = 0;
};

Traffic expected_traffic(const testing::SyntheticJob& job, testing::InProcNode& node,
                         std::size_t nodes) {
  Traffic t{job.batch * job.features * sizeof(float), 0};
  for (const sync::LayerPlan& row : node.stage().plan()) {
    if (row.scheme != "SFB") continue;
    tasks::Layer& layer = node.model().layer(row.layer);
    const std::size_t factors = job.batch * (layer.output_size() + layer.input_size());
    t.uploaded += nodes * factors * sizeof(float);
    t.downloaded += factors * sizeof(float);
  }
  return t;
}

}  // namespace

TEST_CASE("SFB on a device model rebuilds and steps on the device and trains as the host path",
          "[sync][poseidon][sfb][device]") {
  testing::SyntheticJob job;
  job.options.values.set("poseidon.sfb", std::string("always"));
  for (const std::size_t nodes : {2, 3}) {
    testing::InProcCluster host(job, "poseidon", nodes);
    host.train(kIterations);

    std::vector<EmulatedDevice*> devices;  // by rank: the nodes are made in rank order
    testing::SyntheticJob on_device = job;
    on_device.backend = [&devices]() -> std::unique_ptr<tasks::Backend> {
      auto device = std::make_unique<EmulatedDevice>();
      devices.push_back(device.get());
      return device;
    };
    testing::InProcCluster device(on_device, "poseidon", nodes);
    REQUIRE(devices.size() == nodes);
    device.train(1);  // its first forward uploads every layer's initial parameters
    std::vector<Traffic> after_first;
    for (EmulatedDevice* d : devices)
      after_first.push_back({d->uploaded_bytes, d->downloaded_bytes});
    device.train(kIterations - 1);

    for (std::size_t r = 0; r < nodes; ++r) {
      INFO(nodes << " nodes, rank " << r);
      tasks::Model& model = device.node(r).model();
      REQUIRE(model.on_device());
      const Traffic per_iteration = expected_traffic(job, device.node(r), nodes);
      REQUIRE(per_iteration.downloaded > 0);  // every dense layer is on SFB
      CHECK(devices[r]->uploaded_bytes - after_first[r].uploaded ==
            (kIterations - 1) * per_iteration.uploaded);
      CHECK(devices[r]->downloaded_bytes - after_first[r].downloaded ==
            (kIterations - 1) * per_iteration.downloaded);

      // The host copy is stale until read: parameters() downloads every SFB layer, and what it
      // returns is the device-updated replica, equal to the host path's (bit for bit: the
      // emulated device computes with the CPU kernels).
      const std::size_t before = devices[r]->downloaded_bytes;
      const std::span<const float> p = model.parameters();
      CHECK(devices[r]->downloaded_bytes - before == model.parameter_count() * sizeof(float));
      const std::span<const float> reference = host.node(r).model().parameters();
      CHECK(testing::max_abs_difference(p, reference) <= 1e-6);
      CHECK(std::equal(p.begin(), p.end(), reference.begin()));
      CHECK(device.node(r).stage().rejected_messages() == 0);
    }
  }
}
