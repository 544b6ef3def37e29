// The planner: schemes by time over the scheme models it is given, buckets, chunk size,
// Ako's p, lane budgets and predicted bytes and time. (Poseidon's BestScheme by bytes is
// sync.poseidon.choose, applied before the planner: tests/sync/poseidon/options_test.cpp.)

#include "topo/planner.h"

#include <numeric>
#include <optional>
#include <string>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "topo/kv_placement.h"
#include "topo/merge_planner.h"

using namespace gradmesh::topo;

namespace {

// Scheme sets as the strategies' traits give them (sync::StrategyTraits::schemes, in tie order):
// PS only, PS or SFB, all-reduce only, all three.
const std::vector<SchemeModel> kPs{ps_scheme_model()};
const std::vector<SchemeModel> kPsSfb{ps_scheme_model(), sfb_scheme_model()};
const std::vector<SchemeModel> kAllReduce{allreduce_scheme_model()};
const std::vector<SchemeModel> kAll{ps_scheme_model(), allreduce_scheme_model(),
                                    sfb_scheme_model()};

LayerProfile dense(std::string name, std::size_t outputs, std::size_t inputs, double t_f = 1e-3,
                   double t_b = 2e-3) {
  return LayerProfile{std::move(name), outputs * inputs + outputs, true, outputs, inputs, t_f, t_b};
}

LayerProfile relu(std::string name) {
  return LayerProfile{std::move(name), 0, false, 0, 0, 1e-4, 1e-4};
}

/// The demo MLP 784-256-256-10: dense, ReLU, dense, ReLU, dense.
std::vector<LayerProfile> mlp() {
  return {dense("dense0", 256, 784), relu("relu0"), dense("dense1", 256, 256), relu("relu1"),
          dense("dense2", 10, 256)};
}

PlannerInput input_for(std::vector<LayerProfile> layers, std::size_t batch, std::size_t nodes,
                       double alpha, double bandwidth, double gemm_flops,
                       const std::vector<SchemeModel>& schemes) {
  PlannerInput in;
  in.layers = std::move(layers);
  in.batch = batch;
  in.nodes = nodes;
  in.links = LinkMatrix::uniform(nodes, alpha, bandwidth);
  in.gemm_flops = gemm_flops;
  in.frame_overhead_bytes = 64;
  in.schemes = schemes;
  return in;
}

}  // namespace

TEST_CASE("the scheme is chosen by predicted time: SFB on a slow link, PS on a fast one",
          "[topo][planner]") {
  // One 4096 x 4096 dense layer, K = 64, n = 4.
  const std::vector<LayerProfile> layer{dense("fc", 4096, 4096)};
  SECTION("100 Mbit/s and a fast GEMM: SFB's 6 MB beat PS's 100 MB") {
    const Plan plan = make_plan(input_for(layer, 64, 4, 1e-4, 12.5e6, 1e12, kAll));
    REQUIRE(plan.layers.size() == 1);
    CHECK(plan.layers[0].scheme == kSfbScheme);
    CHECK(plan.layers[0].costs.at("sfb").seconds() < plan.layers[0].costs.at("ps").seconds());
    CHECK(plan.layers[0].compute_seconds == Approx(2.0 * 4 * 64 * 4096 * 4096 / 1e12));
    CHECK(plan.lane_bytes.at("sf_broadcast") == Approx(plan.bytes_sent));
  }
  SECTION("5 GB/s and a slow GEMM: rebuilding dW costs more than sending it") {
    for (const auto* schemes : {&kPsSfb, &kAll}) {
      const Plan plan = make_plan(input_for(layer, 64, 4, 1e-4, 5e9, 2e10, *schemes));
      INFO("schemes allowed: " << schemes->size());
      CHECK(plan.layers[0].scheme != kSfbScheme);
      CHECK(plan.layers[0].costs.at("sfb").compute_seconds > 0.4);  // 8.6 GFLOP at 20 GFLOP/s
      CHECK(plan.lane_bytes.at("sf_broadcast") == 0);
    }
    CHECK(make_plan(input_for(layer, 64, 4, 1e-4, 5e9, 2e10, kPsSfb)).layers[0].scheme ==
          kPsScheme);
  }
}

TEST_CASE(
    "an SFB layer's backward skips dW: the plan takes t_b without it, and the choice counts it",
    "[topo][planner]") {
  // Two 1024 x 1024 dense layers, K = 32, n = 4, 1 Gbit/s, 20 GFLOP/s. PS sends about 4 MB a
  // layer (50 ms); SFB sends 3 x 32 x 2048 floats (6 ms) and rebuilds 2 x 4 x 32 x 1024^2 flops
  // (13 ms). dW takes half of each layer's t_b of 40 ms, layer 0 computes no dx.
  std::vector<LayerProfile> layers{dense("fc0", 1024, 1024, 0.02, 0.04),
                                   dense("fc1", 1024, 1024, 0.02, 0.04)};
  layers[0].backward_input_seconds = 0.0;
  layers[1].backward_seconds = 0.0;
  layers[1].backward_input_seconds = 0.02;
  const Plan plan = make_plan(input_for(layers, 32, 4, 1e-4, 125e6, 2e10, kPsSfb));
  REQUIRE(plan.layers[1].scheme == kSfbScheme);
  REQUIRE(plan.layers[0].scheme == kSfbScheme);
  CHECK(plan.backward_seconds == Approx(0.02));
  CHECK(plan.layers[0].backward_start == Approx(0.04 + 0.02));
  // Both layers are ready at 0.06 s (t_f + t_b); the lower one is sent first (the transport's
  // priority), and the rebuilds queue after the backward pass, one after the other.
  const double rebuild = 2.0 * 4 * 32 * 1024 * 1024 / 2e10;
  CHECK(plan.layers[0].comm_start == Approx(0.06));
  const double sent_0 = plan.layers[0].comm_start + plan.layers[0].comm_seconds;
  CHECK(plan.layers[1].comm_start == Approx(sent_0));
  const double sent_last = plan.layers[1].comm_start + plan.layers[1].comm_seconds;
  const double rebuilt_0 = std::max(0.06, sent_0) + rebuild;
  CHECK(plan.iteration_seconds == Approx(std::max(rebuilt_0, sent_last) + rebuild));
  CHECK(plan.iteration_seconds >= sent_last);
  // Without the measured saving SFB pays its rebuild on top of a full backward; with a slow GEMM
  // that tips the choice to PS, and the saving tips it back.
  std::vector<LayerProfile> one{dense("fc", 1024, 1024, 0.02, 0.04)};
  const PlannerInput slow_gemm = input_for(one, 32, 4, 1e-4, 125e6, 3e9, kPsSfb);
  CHECK(make_plan(slow_gemm).layers[0].scheme == kPsScheme);  // 89 + 6 ms vs PS's 50 ms
  one[0].backward_input_seconds = 0.0;  // e.g. layer 0: SFB saves the whole 40 ms backward
  PlannerInput saving = input_for(one, 32, 4, 1e-4, 125e6, 3e9, kPsSfb);
  CHECK(make_plan(saving).layers[0].scheme == kPsScheme);  // 89 + 6 - 40 > 50: still PS
  saving.gemm_flops = 5e9;  // 54 ms rebuild: 54 + 6 - 40 = 20 ms < 50 ms
  CHECK(make_plan(saving).layers[0].scheme == kSfbScheme);
  one[0].backward_input_seconds.reset();
  PlannerInput no_saving = input_for(one, 32, 4, 1e-4, 125e6, 5e9, kPsSfb);
  CHECK(make_plan(no_saving).layers[0].scheme == kPsScheme);  // 54 + 6 > 50
}

TEST_CASE("the MLP under ps: predicted bytes are the sum of the layers' PS bytes",
          "[topo][planner]") {
  const Plan plan = make_plan(input_for(mlp(), 32, 4, 1e-4, 1e8, 1e10, kPs));
  const std::size_t total = 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10;
  CHECK(plan.kv_chunk_floats == KvPlacement::auto_chunk_floats(total, 4));
  const ClusterCost cluster{4, plan.link, 64, 1e10};
  double sum = 0;
  for (std::size_t l : {0u, 2u, 4u}) {
    const PlannedLayer& row = plan.layers[l];
    CHECK(row.scheme == kPsScheme);
    CHECK(row.chunks == chunks_of(row.parameters, plan.kv_chunk_floats));
    CHECK(row.bytes_sent ==
          Approx(ps_cost(cluster, row.parameters, plan.kv_chunk_floats).bytes_sent));
    CHECK_FALSE(row.costs.contains("sfb"));
    CHECK_FALSE(row.costs.contains("allreduce"));
    sum += row.bytes_sent;
  }
  CHECK(plan.layers[1].scheme == kLocalScheme);
  CHECK(plan.layers[3].scheme == kLocalScheme);
  CHECK(plan.layers[1].bytes_sent == 0);
  CHECK(plan.bytes_sent == Approx(sum));
  // 2 (n - 1)/n of the model plus the headers, half pushed, half broadcast.
  CHECK(plan.bytes_sent > 1.5 * 4 * total);
  CHECK(plan.lane_bytes.at("kv_push") == Approx(sum / 2));
  CHECK(plan.lane_bytes.at("kv_broadcast") == Approx(sum / 2));
  CHECK_FALSE(plan.lane_bytes.contains("sf_broadcast"));  // lanes of the allowed schemes only
  CHECK_FALSE(plan.lane_bytes.contains("allreduce"));
  CHECK(plan.buckets.empty());
  CHECK(plan.iteration_seconds > plan.forward_seconds + plan.backward_seconds);
  // An explicit chunk size: 4 KiB = 1024 floats.
  PlannerInput in = input_for(mlp(), 32, 4, 1e-4, 1e8, 1e10, kPs);
  in.kv_chunk_bytes = 4096;
  const Plan chunked = make_plan(in);
  CHECK(chunked.kv_chunk_floats == 1024);
  CHECK(chunked.layers[4].chunks == 3);  // 2570 floats
}

TEST_CASE("one node: every layer is local, nothing is sent", "[topo][planner]") {
  PlannerInput in = input_for(mlp(), 32, 1, 0, 1, 0, kAll);
  in.gamma = 50;
  const Plan plan = make_plan(in);
  for (const PlannedLayer& row : plan.layers) {
    CHECK(row.scheme == kLocalScheme);
    CHECK(row.bytes_sent == 0);
  }
  CHECK(plan.bytes_sent == 0);
  for (const auto& [lane, bytes] : plan.lane_bytes) CHECK(bytes == 0);
  CHECK(plan.lane_bytes.size() == 4);
  CHECK(plan.buckets.empty());
  CHECK(plan.iteration_seconds == Approx(plan.forward_seconds + plan.backward_seconds));
  REQUIRE(plan.ako.has_value());
  CHECK(plan.ako->partitions == 1);
}

TEST_CASE("allreduce: buckets cover every layer with parameters, merged when start-up dominates",
          "[topo][planner]") {
  SECTION("high latency, quick backward: one bucket") {
    const Plan plan = make_plan(input_for(mlp(), 32, 4, 5e-3, 1e9, 0, kAllReduce));
    REQUIRE(plan.buckets.size() == 1);
    CHECK(plan.buckets[0].first == 0);
    CHECK(plan.buckets[0].last == 4);
    CHECK(plan.buckets[0].floats == 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10);
    CHECK(plan.buckets[0].bytes_sent ==
          Approx(ring_allreduce_bytes(4.0 * plan.buckets[0].floats, 4, 64)));
    CHECK(plan.lane_bytes.at("allreduce") == Approx(plan.bytes_sent));
    for (std::size_t l : {0u, 2u, 4u}) CHECK(plan.layers[l].bucket == std::size_t{0});
    CHECK(plan.iteration_seconds == Approx(plan.forward_seconds + plan.backward_seconds +
                                           plan.allreduce.seconds(4.0 * plan.buckets[0].floats)));
  }
  SECTION("no latency, slow backward: one bucket per layer, all hidden but the first") {
    std::vector<LayerProfile> layers = mlp();
    for (LayerProfile& layer : layers) layer.backward_seconds = 1.0;
    const Plan plan = make_plan(input_for(layers, 32, 4, 0, 1e9, 0, kAllReduce));
    CHECK(plan.buckets.size() == 3);
    double bytes = 0;
    for (const Bucket& bucket : plan.buckets) bytes += bucket.bytes_sent;
    CHECK(plan.bytes_sent == Approx(bytes));
    CHECK(plan.buckets.back().first == 0);  // sent last
  }
}

TEST_CASE("auto buckets many small layers when PS or SFB would pay a start-up per layer",
          "[topo][planner]") {
  std::vector<LayerProfile> layers;
  for (int l = 0; l < 8; ++l) layers.push_back(dense("fc" + std::to_string(l), 16, 16, 1e-5, 1e-5));
  const Plan plan = make_plan(input_for(layers, 8, 4, 1e-2, 1e9, 1e10, kAll));
  for (const PlannedLayer& row : plan.layers) CHECK(row.scheme == kAllReduceScheme);
  CHECK(plan.buckets.size() == 1);
  const Plan ps = make_plan(input_for(layers, 8, 4, 1e-2, 1e9, 1e10, kPs));
  CHECK(plan.iteration_seconds < ps.iteration_seconds);
}

TEST_CASE("auto puts a small model's many KV chunks on one bucket once messages cost CPU",
          "[topo][planner]") {
  // The demo MLP on 4 nodes, fast link: with o = 0 PS's chunks cost only their bytes and PS wins;
  // with o = 40 us (what 4 nodes on 2 loopback cores measure) ~200 chunk messages per iteration
  // cost ~8 ms and the one all-reduce bucket (6 one-message steps) wins.
  PlannerInput in = input_for(mlp(), 64, 4, 1e-4, 1.25e9, 2e10, kAll);
  in.kv_chunk_bytes = 8448;  // 2112 floats, the PS stage's auto chunk for this model on 4 nodes
  in.links.message_seconds.assign(4, 0.0);
  const Plan cheap = make_plan(in);
  CHECK(cheap.layers[0].scheme == kPsScheme);
  in.links.message_seconds.assign(4, 40e-6);
  const Plan costly = make_plan(in);
  // The big layers go to the bucket; the classifier's 2 chunks may stay on PS (its push overlaps
  // the backward pass of the layers below, so it costs the iteration nothing).
  for (const std::size_t l : {0u, 2u}) CHECK(costly.layers[l].scheme == kAllReduceScheme);
  CHECK(costly.link.message_seconds == 40e-6);
  in.schemes = kPs;
  const Plan ps = make_plan(in);
  CHECK(ps.iteration_seconds > costly.iteration_seconds + 100 * 40e-6);
}

TEST_CASE("the plan uses the slowest link and gives Ako's p from eq. 3", "[topo][planner]") {
  PlannerInput in = input_for(mlp(), 32, 3, 1e-4, 1e9, 1e10, kAll);
  in.links.bandwidth[2 * 3 + 0] = 12.5e6;
  in.links.alpha[1 * 3 + 2] = 2e-3;
  in.gamma = 40;
  const Plan plan = make_plan(in);
  CHECK(plan.link.bandwidth == 12.5e6);
  CHECK(plan.link.alpha == 2e-3);
  const std::size_t total = 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10;
  REQUIRE(plan.ako.has_value());
  CHECK(plan.ako->partitions == partitions_for(40, total, 3, 12.5e6).partitions);
  CHECK(plan.ako->partitions > 1);
  // The predicted time is the WFBP pipeline of the plan's own layers.
  double lanes = 0;
  for (const auto& [lane, bytes] : plan.lane_bytes) lanes += bytes;
  CHECK(lanes == Approx(plan.bytes_sent));
  CHECK(plan.iteration_seconds >= plan.forward_seconds + plan.backward_seconds);
}

TEST_CASE("bad planner inputs throw ContractError naming the value", "[topo][planner]") {
  PlannerInput in = input_for(mlp(), 32, 4, 1e-4, 1e9, 1e10, kAll);
  in.nodes = 0;
  in.links = LinkMatrix::uniform(0, 1e-4, 1e9);
  CHECK_THROWS_AS(make_plan(in), gradmesh::ContractError);
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("nodes n = 0"));

  in = input_for(mlp(), 32, 4, 1e-4, 0, 1e10, kAll);
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("bandwidth") && Catch::Contains("= 0"));
  in = input_for(mlp(), 32, 4, 1e-4, -1e6, 1e10, kAll);
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("-1e+06"));

  in = input_for(mlp(), 32, 4, 1e-4, 1e9, 1e10, kAll);
  in.layers[2].backward_seconds = -0.5;
  CHECK_THROWS_AS(make_plan(in), gradmesh::ContractError);
  CHECK_THROWS_WITH(make_plan(in),
                    Catch::Contains("dense1") && Catch::Contains("t_b") && Catch::Contains("-0.5"));
  in.layers[2].backward_seconds = 1e-3;
  in.layers[2].backward_input_seconds = -1e-3;
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("without dW") && Catch::Contains("-0.001"));
  in.layers[2].backward_input_seconds.reset();
  in.layers[0].forward_seconds = -2;
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("t_f") && Catch::Contains("-2"));
  in.layers[0].forward_seconds = 1e-3;

  in.layers[0].parameters = 784 * 256;  // no bias
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("200704"));
  in.layers[0].parameters = 784 * 256 + 256;
  in.links = LinkMatrix::uniform(3, 1e-4, 1e9);
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("= 3"));
  in.links = LinkMatrix::uniform(4, 1e-4, 1e9);
  in.gemm_flops = 0;
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("GEMM"));
  in.gemm_flops = 1e10;
  in.batch = 0;
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("batch K = 0"));
  in.batch = 32;
  in.schemes = {sfb_scheme_model()};  // SFB alone cannot carry a layer without factors
  in.layers[1].parameters = 10;
  CHECK_THROWS_AS(make_plan(in), gradmesh::ContractError);
  in.gamma = -1;
  in.schemes = kAll;
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("gamma"));
}

TEST_CASE("the planner prices any scheme model it is given, by id, in tie order",
          "[topo][planner]") {
  // A scheme that costs half of PS (as if it sent fp16), on a lane of its own.
  SchemeModel half = ps_scheme_model();
  half.id = "half";
  half.chunked = false;
  half.cost = [](const SchemeCostInput& in, const LayerProfile& layer) {
    SchemeCost c = ps_cost(in.cluster, layer.parameters, in.kv_chunk_floats);
    c.bytes_sent /= 2;
    c.comm_seconds /= 2;
    return c;
  };
  half.lanes = {{"half_lane", 1.0}};
  PlannerInput in = input_for(mlp(), 32, 4, 1e-4, 1e8, 1e10, {ps_scheme_model(), half});
  const Plan plan = make_plan(in);
  double bytes = 0;
  for (std::size_t l : {0u, 2u, 4u}) {
    const PlannedLayer& row = plan.layers[l];
    CHECK(row.scheme == "half");
    CHECK(row.chunks == 0);  // not chunked
    CHECK(row.costs.at("half").bytes_sent == Approx(row.costs.at("ps").bytes_sent / 2));
    CHECK(row.bytes_sent == Approx(row.costs.at("half").bytes_sent));
    bytes += row.bytes_sent;
  }
  CHECK(plan.lane_bytes.at("half_lane") == Approx(bytes));
  CHECK(plan.lane_bytes.at("kv_push") == 0);  // allowed, unused
  // Equal costs: the earlier scheme wins.
  SchemeModel same = ps_scheme_model();
  same.id = "same";
  in.schemes = {same, ps_scheme_model()};
  for (std::size_t l : {0u, 2u, 4u}) CHECK(make_plan(in).layers[l].scheme == "same");
  in.schemes = {ps_scheme_model(), same};
  for (std::size_t l : {0u, 2u, 4u}) CHECK(make_plan(in).layers[l].scheme == kPsScheme);
}

TEST_CASE("a bucketed scheme's payload per layer sizes its buckets", "[topo][planner]") {
  SchemeModel fp16 = allreduce_scheme_model();
  fp16.id = "allreduce_fp16";
  fp16.bucket_bytes = [](const LayerProfile& layer) {
    return 2.0 * static_cast<double>(layer.parameters);
  };
  const Plan plan = make_plan(input_for(mlp(), 32, 4, 5e-3, 1e9, 0, {fp16}));
  REQUIRE(plan.buckets.size() == 1);
  CHECK(plan.buckets[0].bytes_sent ==
        Approx(ring_allreduce_bytes(2.0 * plan.buckets[0].floats, 4, 64)));
  CHECK(plan.lane_bytes.at("allreduce") == Approx(plan.bytes_sent));
  for (std::size_t l : {0u, 2u, 4u}) CHECK(plan.layers[l].scheme == "allreduce_fp16");
}

TEST_CASE("of several bucketed schemes the plan keeps the one with the shortest iteration",
          "[topo][planner]") {
  SchemeModel fp16 = allreduce_scheme_model();
  fp16.id = "allreduce_fp16";
  fp16.lanes = {{"allreduce_half", 1.0}};
  fp16.bucket_bytes = [](const LayerProfile& layer) {
    return 2.0 * static_cast<double>(layer.parameters);
  };
  SECTION("half the bytes on a slow link: the 16-bit buckets") {
    const Plan plan =
        make_plan(input_for(mlp(), 32, 4, 5e-3, 1e7, 0, {allreduce_scheme_model(), fp16}));
    for (std::size_t l : {0u, 2u, 4u}) CHECK(plan.layers[l].scheme == "allreduce_fp16");
    CHECK(plan.lane_bytes.at("allreduce_half") == Approx(plan.bytes_sent));
    CHECK(plan.lane_bytes.at("allreduce") == 0);  // allowed, unused
  }
  SECTION("a conversion that costs more than the bytes it saves: the float buckets") {
    SchemeModel slow = fp16;
    slow.cost = [](const SchemeCostInput& in, const LayerProfile& layer) {
      SchemeCost cost = allreduce_cost(in.cluster, layer.parameters);
      cost.compute_seconds += 10.0;
      return cost;
    };
    const Plan plan =
        make_plan(input_for(mlp(), 32, 4, 5e-3, 1e7, 0, {allreduce_scheme_model(), slow}));
    for (std::size_t l : {0u, 2u, 4u}) CHECK(plan.layers[l].scheme == kAllReduceScheme);
  }
  SECTION("equal times: the earlier in the list") {
    SchemeModel same = allreduce_scheme_model();
    same.id = "same";
    const Plan plan =
        make_plan(input_for(mlp(), 32, 4, 5e-3, 1e7, 0, {same, allreduce_scheme_model()}));
    for (std::size_t l : {0u, 2u, 4u}) CHECK(plan.layers[l].scheme == "same");
  }
}

TEST_CASE("bad scheme sets throw ContractError naming the scheme", "[topo][planner]") {
  PlannerInput in =
      input_for(mlp(), 32, 4, 1e-4, 1e9, 1e10, {ps_scheme_model(), ps_scheme_model()});
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("'ps'") && Catch::Contains("unique"));
  SchemeModel local = ps_scheme_model();
  local.id = "local";
  in.schemes = {local};
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("'local'"));
  SchemeModel other = allreduce_scheme_model();
  other.id = "other";
  in.schemes = {allreduce_scheme_model(), other};
  // Fixed schemes that name two bucketed schemes: no plan holds both.
  in.fixed_schemes = {std::string("allreduce"), std::nullopt, std::string("other"), std::nullopt,
                      std::nullopt};
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("bucketed") && Catch::Contains("at most one"));
  in.fixed_schemes.clear();
  SchemeModel no_cost = ps_scheme_model();
  no_cost.id = "no_cost";
  no_cost.cost = nullptr;
  in.schemes = {no_cost};
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("no_cost") && Catch::Contains("cost function"));
  in.schemes = kPs;
  in.fixed_schemes.assign(in.layers.size(), std::nullopt);
  in.fixed_schemes[0] = std::string(kSfbScheme);  // not allowed
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("dense0") && Catch::Contains("sfb"));
  in.schemes = kPsSfb;
  in.fixed_schemes[0] = std::nullopt;
  in.fixed_schemes[1] = std::string(kSfbScheme);  // a ReLU: no parameters, ignored
  CHECK_NOTHROW(make_plan(in));
  in.layers[0].sufficient_factors = false;  // SFB does not fit a layer without factors
  in.fixed_schemes[0] = std::string(kSfbScheme);
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("dense0") && Catch::Contains("fits"));
}

TEST_CASE(
    "a plan mixing schemes is kept only when predicted kMixedPlanMargin faster than the "
    "all-bucketed plan",
    "[topo][planner]") {
  // The demo MLP, all-reduce for every layer, and "side": a scheme that fits the first layer only
  // (200,960 parameters), at a communication time c of our choosing. Layer by layer that layer
  // goes to side whenever c is under its all-reduce time alone: a mixed plan. Scanning c, make_plan
  // must keep the mixed plan exactly when its predicted iteration, times 1 + kMixedPlanMargin, is
  // not longer than the all-bucketed plan's; both outcomes, and a mixed plan predicted faster but
  // within the margin, must occur in the scan (else it tests nothing).
  SchemeModel side = ps_scheme_model();
  side.id = "side";
  side.chunked = false;
  side.fits = [](const LayerProfile& layer) { return layer.name == "dense0"; };
  side.lanes = {{"side_lane", 1.0}};
  const std::size_t first = 0;
  bool kept = false;
  bool within_margin = false;
  bool bucketed = false;
  for (double c = 1e-6; c < 0.1; c *= 1.5) {
    side.cost = [c](const SchemeCostInput&, const LayerProfile&) {
      SchemeCost cost;
      cost.bytes_sent = 1000;
      cost.comm_seconds = c;
      return cost;
    };
    PlannerInput in = input_for(mlp(), 64, 4, 1e-4, 1.25e9, 2e10, {allreduce_scheme_model(), side});
    const Plan free = make_plan(in);
    in.fixed_schemes.assign(in.layers.size(), std::nullopt);
    for (std::size_t l : {2u, 4u}) in.fixed_schemes[l] = std::string(kAllReduceScheme);
    in.fixed_schemes[first] = std::string("side");
    const double mixed = make_plan(in).iteration_seconds;
    in.fixed_schemes[first] = std::string(kAllReduceScheme);
    const double all_bucketed = make_plan(in).iteration_seconds;
    // The layer-by-layer choice is side when c is under the layer's all-reduce time alone.
    const bool choice_mixed =
        c < free.layers[first].costs.at(std::string(kAllReduceScheme)).comm_seconds;
    INFO("c = " << c << " s, mixed " << mixed << " s, all-bucketed " << all_bucketed << " s");
    if (!choice_mixed) {
      CHECK(free.layers[first].scheme == kAllReduceScheme);
      continue;
    }
    const bool keep = mixed * (1.0 + kMixedPlanMargin) <= all_bucketed;
    CHECK(free.layers[first].scheme == (keep ? "side" : kAllReduceScheme));
    CHECK(free.iteration_seconds == Approx(keep ? mixed : all_bucketed));
    kept = kept || keep;
    bucketed = bucketed || !keep;
    within_margin = within_margin || (!keep && mixed < all_bucketed);
  }
  CHECK(kept);
  CHECK(bucketed);
  CHECK(within_margin);
}

TEST_CASE("a compressed scheme is planned only when it saves kCompressionMargin of the iteration",
          "[topo][planner]") {
  // PS with its bytes and link time scaled by `share`, marked compressed, on a lane of its own.
  const auto scaled_ps = [](double share) {
    SchemeModel m = ps_scheme_model();
    m.id = "ps_scaled";
    m.compressed = true;
    m.lanes = {{"scaled_lane", 1.0}};
    m.cost = [share](const SchemeCostInput& in, const LayerProfile& layer) {
      SchemeCost c = ps_cost(in.cluster, layer.parameters, in.kv_chunk_floats);
      c.bytes_sent *= share;
      c.comm_seconds *= share;
      return c;
    };
    return m;
  };
  // A slow link: the iteration is almost all PS's link time, so scaling it scales the iteration.
  PlannerInput in = input_for(mlp(), 32, 4, 1e-4, 1e6, 1e10, {ps_scheme_model(), scaled_ps(0.5)});
  const Plan uncompressed = make_plan(input_for(mlp(), 32, 4, 1e-4, 1e6, 1e10, kPs));
  SECTION("half the link time: planned, both predictions recorded") {
    const Plan plan = make_plan(in);
    for (std::size_t l : {0u, 2u, 4u}) CHECK(plan.layers[l].scheme == "ps_scaled");
    CHECK(plan.compressed_iteration_seconds == Approx(plan.iteration_seconds));
    CHECK(plan.uncompressed_iteration_seconds == Approx(uncompressed.iteration_seconds));
    CHECK(plan.iteration_seconds < 0.6 * uncompressed.iteration_seconds);
  }
  SECTION("a saving under the margin: the plan without compression, its lanes at 0") {
    in.schemes[1] = scaled_ps(0.95);
    const Plan plan = make_plan(in);
    for (std::size_t l : {0u, 2u, 4u}) CHECK(plan.layers[l].scheme == kPsScheme);
    CHECK(plan.iteration_seconds == Approx(uncompressed.iteration_seconds));
    // Predicted faster all the same, by less than the margin.
    CHECK(plan.compressed_iteration_seconds < plan.uncompressed_iteration_seconds);
    CHECK(plan.compressed_iteration_seconds >
          (1.0 - kCompressionMargin) * plan.uncompressed_iteration_seconds);
    CHECK(plan.lane_bytes.at("scaled_lane") == 0);  // allowed, unused
    CHECK(plan.lane_bytes.at("kv_push") > 0);
  }
  SECTION("a layer fixed to the compressed scheme keeps it: no comparison") {
    in.schemes[1] = scaled_ps(0.95);
    in.fixed_schemes = {std::string("ps_scaled"), std::nullopt, std::nullopt, std::nullopt,
                        std::nullopt};
    const Plan plan = make_plan(in);
    CHECK(plan.layers[0].scheme == "ps_scaled");
    CHECK(plan.uncompressed_iteration_seconds == 0);
  }
  SECTION("no uncompressed scheme allowed: the compressed one") {
    in.schemes = {scaled_ps(0.95)};
    const Plan plan = make_plan(in);
    for (std::size_t l : {0u, 2u, 4u}) CHECK(plan.layers[l].scheme == "ps_scaled");
    CHECK(plan.uncompressed_iteration_seconds == 0);
  }
}

TEST_CASE("a scheme's encode runs after its layer's backward and before its communication",
          "[topo][planner]") {
  // One fixed cost per layer: 2 ms encode, 5 ms on the link, 1 ms after.
  SchemeModel coded = ps_scheme_model();
  coded.id = "coded";
  coded.lanes = {{"coded_lane", 1.0}};
  coded.cost = [](const SchemeCostInput&, const LayerProfile&) {
    SchemeCost c;
    c.bytes_sent = 1000;
    c.encode_seconds = 2e-3;
    c.comm_seconds = 5e-3;
    c.compute_seconds = 1e-3;
    c.codec_seconds = 3e-3;
    return c;
  };
  // Two dense layers, t_f 1 ms and t_b 2 ms each.
  const Plan plan = make_plan(
      input_for({dense("dense0", 8, 8), dense("dense1", 8, 8)}, 4, 2, 1e-4, 1e9, 1e10, {coded}));
  REQUIRE(plan.layers[1].scheme == "coded");
  CHECK(plan.layers[1].encode_seconds == Approx(2e-3));
  CHECK(plan.layers[1].compute_seconds == Approx(1e-3));
  // The backward chain: dense1's backward and encode (2 + 2 ms) before dense0's backward.
  CHECK(plan.layers[1].backward_start == Approx(2e-3));
  CHECK(plan.layers[0].backward_start == Approx(2e-3 + 2e-3 + 2e-3));
  // dense1 sends once encoded (6 ms); dense0 once its backward and encode have ended (10 ms),
  // overtaking dense1 on their lane (the lower layer first) until 15 ms, when dense1's last
  // millisecond goes.
  CHECK(plan.layers[1].comm_start == Approx(6e-3));
  CHECK(plan.layers[0].comm_start == Approx(10e-3));
  // The link's last end (16 ms) and dense1's work after it (1 ms).
  CHECK(plan.iteration_seconds == Approx(17e-3));
  // The plan's backward time is the layers' own, without the encodes.
  CHECK(plan.backward_seconds == Approx(4e-3));
}

TEST_CASE(
    "the transport's work on the bytes runs on the compute: a fast link's PS gives way to SFB",
    "[topo][planner]") {
  // One 4096 x 4096 layer, K = 32, 4 nodes, 1 GB/s, 30 GFLOP/s. PS sends 1.5 x 67 MB = 101 MB a
  // node (0.10 s on the link); SFB 3 x 32 x 8192 x 4 = 3.1 MB and rebuilds 2 n K M N = 4.3 GFLOP
  // (0.14 s).
  const std::vector<LayerProfile> layers{dense("dense0", 4096, 4096)};
  PlannerInput in = input_for(layers, 32, 4, 1e-4, 1e9, 3e10, kPsSfb);
  const Plan free_bytes = make_plan(in);
  CHECK(free_bytes.layers[0].scheme == kPsScheme);
  CHECK(free_bytes.transport_seconds == 0);
  // At 0.5 ns a byte sent or received, PS's bytes cost the cores 2 x 101 MB x 0.5 ns = 0.10 s
  // more than its link time, SFB's 3 ms.
  in.transport_seconds_per_byte = 0.5e-9;
  const Plan plan = make_plan(in);
  CHECK(plan.layers[0].scheme == kSfbScheme);
  const SchemeCost& ps = plan.layers[0].costs.at(std::string(kPsScheme));
  CHECK(ps.transport_seconds == Approx(2 * ps.bytes_sent * 0.5e-9));
  CHECK(ps.seconds() == Approx(ps.comm_seconds + ps.transport_seconds));
  CHECK(plan.transport_seconds == Approx(2 * plan.bytes_sent * 0.5e-9));
  CHECK(plan.transport_seconds_per_byte == 0.5e-9);
  // PS fixed, at 1 ns a byte: its work on the bytes follows the backward pass on the compute
  // (t_f + t_b + 0.20 s), past the end of its communication (t_f + t_b + 0.10 s).
  in.fixed_schemes = {std::string(kPsScheme)};
  in.transport_seconds_per_byte = 1e-9;
  const Plan fixed = make_plan(in);
  CHECK(fixed.transport_seconds == Approx(2 * fixed.bytes_sent * 1e-9));
  CHECK(fixed.iteration_seconds == Approx(1e-3 + 2e-3 + fixed.transport_seconds));
  in.transport_seconds_per_byte = -1e-9;
  CHECK_THROWS_WITH(make_plan(in), Catch::Contains("transport work per byte"));
}

TEST_CASE("the plan times the link as the transport shares it: the lowest layer ready goes first",
          "[topo][planner]") {
  // Two SFB layers ready together (the lower one's backward skips dW and its input gradient):
  // 4096 x 784 and 4096 x 4096, K = 32, n = 4, 100 Mbit/s, 50 GFLOP/s.
  std::vector<LayerProfile> layers{dense("dense0", 4096, 784, 5e-3, 5e-3), relu("relu1"),
                                   dense("dense2", 4096, 4096, 30e-3, 40e-3)};
  layers[0].backward_input_seconds = 0.0;
  layers[1].backward_seconds = 0.0;
  const std::vector<SchemeModel> sfb_only{sfb_scheme_model()};
  const Plan plan = make_plan(input_for(layers, 32, 4, 1e-4, 12.5e6, 50e9, sfb_only));
  REQUIRE(plan.layers[0].scheme == kSfbScheme);
  REQUIRE(plan.layers[2].scheme == kSfbScheme);
  const PlannedLayer& lower = plan.layers[0];
  const PlannedLayer& upper = plan.layers[2];
  // Both are ready at once; the lower one holds the link first, the upper one waits for it.
  CHECK(lower.comm_start == Approx(upper.backward_start + 40e-3));
  CHECK(upper.comm_start == Approx(lower.comm_start + lower.comm_seconds));
  // The upper layer's rebuild (4 x 2 x 32 x 4096 x 4096 FLOP) follows the link's end.
  CHECK(plan.iteration_seconds ==
        Approx(upper.comm_start + upper.comm_seconds + upper.compute_seconds));
}
