// Tests for sync/compress/sparse_model.h and sync.compression.ratio: how the planner prices top-k
// and random-k on a layer, and where it chooses them.

#include "sync/compress/sparse_model.h"

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

PlannerInput input(std::vector<LayerProfile> layers, double bandwidth, double step_per_float,
                   const std::string& method, double ratio) {
  sync::CompressionOptions options;
  options.method = method;
  options.ratio = ratio;
  return testing::compressed_planner_input(
      std::move(layers), {ps_scheme_model(), allreduce_scheme_model(), sfb_scheme_model()}, options,
      bandwidth, step_per_float);
}

sync::compress::CompressorParams ratio(double share) {
  return sync::compress::CompressorParams{.ratio = share};
}

const sync::compress::CompressorEntry& topk() { return sync::compress::compressor_entry("topk"); }
const sync::compress::CompressorEntry& randomk() {
  return sync::compress::compressor_entry("randomk");
}

}  // namespace

TEST_CASE("top-k's cost is an all-gather of the pairs, random-k's a ring of the values",
          "[compress][planner]") {
  const ClusterCost cluster{4, LinkCost{1e-4, 12.5e6, 2e-6}, 64.0, 1e10, 1e-9};
  // 100,000 floats at 1%: k = 1,000.
  const SchemeCost top = sync::gathered_cost(cluster, 100'000, topk(), ratio(0.01));
  const double top_steps = topk().cost.encode_steps;
  CHECK(top.bytes_sent == Approx(3 * (8.0 * 1000 + 64)));
  CHECK(top.messages == 3);
  CHECK(top.comm_seconds == Approx(1e-4 + 3 * 2e-6 + top.bytes_sent / 12.5e6));
  // The encode before the all-gather, the decodes and the step after it.
  CHECK(top.encode_seconds == Approx(top_steps * 100'000 * 1e-9));
  CHECK(top.compute_seconds == Approx((sync::kSparseDecodeSteps + 1) * 100'000 * 1e-9));
  CHECK(top.codec_seconds == Approx((top_steps + sync::kSparseDecodeSteps) * 100'000 * 1e-9));
  CHECK(top.seconds() ==
        Approx(top.comm_seconds + (top_steps + sync::kSparseDecodeSteps + 1) * 100'000 * 1e-9));
  const SchemeCost random = sync::gathered_cost(cluster, 100'000, randomk(), ratio(0.01));
  CHECK(random.bytes_sent == Approx(ring_allreduce_bytes(4.0 * 1000, 4, 64)));
  CHECK(random.comm_seconds ==
        Approx(ring_allreduce_cost(cluster.link, 4, 64).seconds(4.0 * 1000)));
  CHECK(random.messages == 6);
  // k is at least one entry; one node sends nothing.
  CHECK(sync::gathered_cost(cluster, 10, topk(), ratio(0.01)).bytes_sent == Approx(3 * (8.0 + 64)));
  ClusterCost alone = cluster;
  alone.nodes = 1;
  CHECK(sync::gathered_cost(alone, 100'000, topk(), ratio(0.01)).bytes_sent == 0);
  CHECK(sync::gathered_cost(alone, 100'000, randomk(), ratio(0.01)).seconds() == 0);
  CHECK_THROWS_AS(sync::sparse_scheme_model("int4", ratio(0.01)), ConfigError);
}

TEST_CASE("the planner sparsifies large layers on a slow link, not on a fast one",
          "[compress][planner]") {
  const std::vector<LayerProfile> layers{dense_profile("dense0", 2048, 784),
                                         dense_profile("dense1", 2048, 2048),
                                         dense_profile("dense2", 10, 2048)};
  for (const std::string method : {"topk", "randomk"}) {
    INFO(method);
    {  // 100 Mbit/s: the wide layers go sparse, a fraction of the bytes
      const Plan plan = make_plan(input(layers, 12.5e6, 1e-9, method, 0.01));
      CHECK(plan.layers[0].scheme == method);
      CHECK(plan.layers[1].scheme == method);
      CHECK(plan.layers[1].bytes_sent < 0.05 * plan.layers[1].costs.at("allreduce").bytes_sent);
      CHECK(plan.lane_bytes.at(method) > 0);
    }
    {  // a fast link and a slow encode: compressing costs more than it saves
      const Plan plan = make_plan(input(layers, 5e9, 5e-9, method, 0.01));
      for (const PlannedLayer& row : plan.layers) {
        INFO(row.name);
        CHECK(row.scheme != method);
      }
    }
  }
}

TEST_CASE("sync.compression.ratio is a share of at most 1, and top-k runs where all-reduce does",
          "[compress][config]") {
  sync::SyncOptions options;
  CHECK(sync::compression_options(options.values).ratio == 0.01);  // the default
  for (const double bad : {0.0, -0.5, 1.5}) {
    INFO(bad);
    CHECK_THROWS_WITH(options.values.set("compression.ratio", bad),
                      Catch::Contains("compression.ratio") && Catch::Contains("(0, 1]"));
  }
  options.values.set("compression.ratio", std::int64_t{1});
  CHECK(sync::compression_options(options.values).ratio == 1.0);
  options.values.set("compression.method", std::string("topk"));
  const sync::StartFacts facts{4, false, true};
  CHECK_NOTHROW(sync::check_strategy("auto", facts, options));
  CHECK_NOTHROW(sync::check_strategy("allreduce", facts, options));
  CHECK_THROWS_WITH(sync::check_strategy("ps", facts, options),
                    Catch::Contains("sync.compression.method"));
}

TEST_CASE("a dense compressor all-gathered is priced by its own size and costs",
          "[compress][planner]") {
  const ClusterCost cluster{4, LinkCost{1e-4, 12.5e6, 2e-6}, 64.0, 1e10, 1e-9};
  for (const char* method : {"sign", "qsgd"}) {
    INFO(method);
    const auto& entry = sync::compress::compressor_entry(method);
    const sync::compress::CompressorParams params{.bits = 4};
    const auto bytes = static_cast<double>(entry.encoded_bytes(100'000, params));
    CHECK(bytes == (std::string(method) == "sign" ? 4.0 * 196 + 12'500 : 4.0 * 196 + 50'000));
    const SchemeCost cost = sync::gathered_cost(cluster, 100'000, entry, params);
    CHECK(cost.bytes_sent == Approx(3 * (bytes + 64)));
    CHECK(cost.messages == 3);
    CHECK(cost.encode_seconds == Approx(entry.cost.encode_steps * 100'000 * 1e-9));
    // The 4 nodes' encodings decoded (dense: each a pass over the layer), the scheme's passes,
    // the step.
    CHECK(cost.compute_seconds ==
          Approx((4 * entry.cost.decode_steps + sync::kSparseDecodeSteps + 1) * 100'000 * 1e-9));
  }
}
