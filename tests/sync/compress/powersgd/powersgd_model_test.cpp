// Tests for sync/compress/powersgd/powersgd_model.h and the [sync.compression] options: how the
// planner prices PowerSGD on a layer, and where it chooses it.

#include "sync/compress/powersgd/powersgd_model.h"

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "sync/compress/options.h"
#include "sync/sync_stage.h"
#include "tests/sync/support/compressed_plan.h"
#include "topo/planner.h"

using namespace gradmesh;
using namespace gradmesh::topo;

namespace {

using testing::dense_profile;

PlannerInput input(std::vector<LayerProfile> layers, double bandwidth, double gemm_flops,
                   std::size_t rank) {
  sync::CompressionOptions options;
  options.method = "powersgd";
  options.rank = static_cast<std::int64_t>(rank);
  return testing::compressed_planner_input(
      std::move(layers), {ps_scheme_model(), allreduce_scheme_model(), sfb_scheme_model()}, options,
      bandwidth, 0.0, gemm_flops);
}

}  // namespace

TEST_CASE("PowerSGD's cost: two ring all-reduces of the factors, three GEMMs and the step",
          "[compress][planner]") {
  ClusterCost cluster{4, LinkCost{1e-4, 12.5e6, 0.0}, 64.0, 1e10, 1e-9};
  const SchemeCost cost = sync::powersgd_cost(cluster, 1000, 500, 1000, 4);
  const double p_bytes = 4.0 * (1000 * 4 + 1000), q_bytes = 4.0 * 500 * 4;
  CHECK(cost.bytes_sent ==
        Approx(ring_allreduce_bytes(p_bytes, 4, 64) + ring_allreduce_bytes(q_bytes, 4, 64)));
  const AllReduceCost ring = ring_allreduce_cost(cluster.link, 4, 64);
  CHECK(cost.comm_seconds == Approx(ring.seconds(p_bytes) + ring.seconds(q_bytes)));
  // The passes over M take longer than the flops at this GEMM rate.
  CHECK(cost.compute_seconds ==
        Approx(sync::kPowerSgdPassesInSteps * 500000 * 1e-9 + 501000.0 * 1e-9));
  cluster.gemm_flops = 1e8;  // a GEMM this slow takes longer than the passes
  CHECK(sync::powersgd_cost(cluster, 1000, 500, 1000, 4).compute_seconds ==
        Approx(6.0 * 1000 * 500 * 4 / 1e8 + 501000.0 * 1e-9));
  CHECK(cost.messages == 12);
  // The rank is capped at the matrix's smaller side; one node sends nothing.
  CHECK(sync::powersgd_cost(cluster, 3, 500, 3, 8).bytes_sent ==
        Approx(ring_allreduce_bytes(4.0 * (3 * 3 + 3), 4, 64) +
               ring_allreduce_bytes(4.0 * 500 * 3, 4, 64)));
  ClusterCost alone = cluster;
  alone.nodes = 1;
  CHECK(sync::powersgd_cost(alone, 1000, 500, 1000, 4).bytes_sent == 0);
  // Passes start-up measured (compress::profile_powersgd) replace the step multiple and the GEMM
  // rate; the step stays; the link's part does not change.
  const CodecSeconds measured{0.003, 0.002};
  const SchemeCost timed = sync::powersgd_cost(cluster, 1000, 500, 1000, 4, measured);
  CHECK(timed.codec_seconds == Approx(0.005));
  CHECK(timed.compute_seconds == Approx(0.005 + 501000.0 * 1e-9));
  CHECK(timed.comm_seconds == sync::powersgd_cost(cluster, 1000, 500, 1000, 4).comm_seconds);
  // The scheme model passes a layer's measured figures (LayerProfile::codec) through.
  LayerProfile layer;
  layer.parameters = 1000 * 500 + 1000;
  layer.weight_rows = 1000;
  layer.weight_cols = 500;
  const SchemeModel model = sync::powersgd_scheme_model(4);
  const SchemeCostInput in{cluster, 32, 1};
  CHECK(model.cost(in, layer).codec_seconds ==
        sync::powersgd_cost(cluster, 1000, 500, 1000, 4).codec_seconds);
  layer.codec = measured;
  CHECK(model.cost(in, layer).codec_seconds == Approx(0.005));
}

TEST_CASE("the planner compresses large layers on a slow link and none on a fast one",
          "[compress][planner]") {
  // The large MLP's shape: two wide layers and a small last one; a bias-only layer has no matrix.
  const std::vector<LayerProfile> layers{dense_profile("dense0", 2048, 784),
                                         dense_profile("dense1", 2048, 2048),
                                         dense_profile("dense2", 10, 2048)};
  SECTION("100 Mbit/s: the wide layers go PowerSGD, a fraction of the bytes") {
    const Plan plan = make_plan(input(layers, 12.5e6, 2e10, 4));
    CHECK(plan.layers[0].scheme == sync::kPowerSgdScheme);
    CHECK(plan.layers[1].scheme == sync::kPowerSgdScheme);
    CHECK(plan.layers[1].bytes_sent < 0.01 * plan.layers[1].costs.at("allreduce").bytes_sent);
    CHECK(plan.lane_bytes.at(std::string(sync::kPowerSgdLane)) > 0);
  }
  SECTION("a fast link and a slow GEMM: compressing costs more than it saves") {
    const Plan plan = make_plan(input(layers, 5e9, 1e9, 4));
    for (const PlannedLayer& row : plan.layers) {
      INFO(row.name);
      CHECK(row.scheme != sync::kPowerSgdScheme);
    }
  }
  SECTION("a layer without a weight matrix is never PowerSGD's") {
    LayerProfile bias_only{"bias", 10, false, 0, 0, 1e-4, 1e-4};
    const Plan plan = make_plan(input({bias_only, layers[1]}, 12.5e6, 2e10, 4));
    CHECK(plan.layers[0].scheme != sync::kPowerSgdScheme);
    CHECK_FALSE(plan.layers[0].costs.contains(std::string(sync::kPowerSgdScheme)));
  }
}

TEST_CASE("compression runs under auto and allreduce, other strategies refuse it by name",
          "[compress][config]") {
  sync::SyncOptions options;
  options.values.set("compression.method", std::string("powersgd"));
  const sync::StartFacts facts{4, false, true};
  CHECK_NOTHROW(sync::check_strategy("auto", facts, options));
  CHECK_NOTHROW(sync::check_strategy("allreduce", facts, options));
  for (const char* strategy : {"ps", "poseidon", "ako"}) {
    INFO(strategy);
    CHECK_THROWS_WITH(sync::check_strategy(strategy, facts, options),
                      Catch::Contains("sync.compression.method") && Catch::Contains(strategy));
  }
  CHECK_THROWS_WITH(options.values.set("compression.method", std::string("zip")),
                    Catch::Contains("compression.method"));
  CHECK_THROWS(options.values.set("compression.rank", std::int64_t{0}));
  CHECK(sync::compression_options(options.values).rank == 2);  // the default
}
