// Tests for sync/none_stage.h: one node steps each layer with the node's optimizer.

#include "sync/none_stage.h"

#include <catch2/catch.hpp>

#include "tasks/layers/layer_spec.h"
#include "tasks/optim/sgd.h"
#include "tests/sync/support/inproc_cluster.h"

using namespace gradmesh;
using gradmesh::testing::InProcNode;
using gradmesh::testing::SyntheticJob;

TEST_CASE("none equals plain SGD with momentum on the whole model", "[sync][none]") {
  SyntheticJob job;
  InProcNode node(job, "none", 0, 1, nullptr, {0});
  tasks::Model reference(tasks::parse_layer_specs(job.layers), job.features, job.batch, job.seed);
  const tasks::Sgd sgd(job.sgd);
  std::vector<float> velocity(reference.parameter_count(), 0.0f);
  std::vector<float> x(job.batch * job.features);
  std::vector<std::int32_t> y(job.batch);
  for (std::uint64_t i = 0; i < 4; ++i) {
    const float loss = node.step();
    testing::synthetic_batch(job, 4, 0, i, job.batch, x, y);
    CHECK(reference.forward_backward(x, y) == Approx(loss));
    sgd.step(reference.parameters(), reference.gradients(), velocity);
  }
  CHECK(testing::max_abs_difference(node.model().parameters(), reference.parameters()) <= 1e-6);
  CHECK(node.stage().plan().size() == reference.num_layers());
}
