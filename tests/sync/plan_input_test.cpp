// Tests for sync/plan_input.cpp on a convolutional model: conv layers reach the planner without
// sufficient factors (Poseidon ATC'17 sec. 3.2), so poseidon keeps them on the parameter server.

#include "sync/plan_input.h"

#include <catch2/catch.hpp>

#include "sync/lane_router.h"
#include "sync/probe/node_profile.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/optim/optimizer.h"

using namespace gradmesh;

namespace {

constexpr std::size_t kBatch = 16, kNodes = 4;

/// A small CNN on 1 x 12 x 12 inputs: conv 3x3x4 (padding 1) - relu - pool 2 - conv 3x3x8 -
/// flatten - dense 32 - relu - dense 10.
tasks::Model small_cnn() {
  return tasks::Model(
      tasks::parse_layer_specs({"conv2d:4:3:1:1", "relu", "max_pool2d:2", "conv2d:8:3", "flatten",
                                "dense:32", "relu", "dense:10", "softmax_cross_entropy"}),
      tasks::Shape{1, 12, 12}, kBatch, 5);
}

/// small_cnn() with what a sync context needs on rank 0 of kNodes (nothing measured).
struct CnnContext {
  tasks::Model model = small_cnn();
  engine::Executor executor;
  sync::LaneRouter router;
  tasks::Optimizer optimizer;
  sync::SyncContext ctx;

  CnnContext()
      : executor({1, 1}),
        router(nullptr, 0, kNodes),
        optimizer({0.05f, 0.9f, 0.0f}, model.parameter_count()),
        ctx{model, executor, router, 0, kNodes, kBatch, optimizer, {}} {}
};

/// The plan rows of strategy `strategy` for `model` on kNodes nodes, nothing measured.
std::vector<sync::LayerPlan> plan_of(tasks::Model& model, const std::string& strategy,
                                     const std::string& sfb) {
  engine::Executor executor({1, 1});
  sync::LaneRouter router(nullptr, 0, kNodes);
  tasks::Optimizer optimizer({0.05f, 0.9f, 0.0f}, model.parameter_count());
  sync::SyncOptions options;
  options.values.set("poseidon.sfb", sfb);
  auto stage = sync::make_sync_stage(
      strategy, sync::SyncContext{model, executor, router, 0, kNodes, kBatch, optimizer, options});
  return stage->plan();
}

}  // namespace

TEST_CASE("planner_input gives conv layers no sufficient factors and their flops",
          "[sync][plan][cnn]") {
  CnnContext cnn;
  tasks::Model& model = cnn.model;
  const sync::SyncContext& ctx = cnn.ctx;
  const sync::AssumedRates rates;
  const topo::PlannerInput input =
      sync::planner_input(ctx, sync::strategy_traits("poseidon").schemes, rates);
  REQUIRE(input.layers.size() == model.num_layers());

  const topo::LayerProfile& conv = input.layers[0];
  CHECK(conv.name == "conv2d0");
  CHECK(conv.parameters == 4 * 9 + 4);
  CHECK_FALSE(conv.sufficient_factors);
  // Each of the 4 x 12 x 12 outputs costs 2 x 9 flops and a bias add, per sample.
  const double conv_flops = kBatch * (2.0 * 9 + 1) * 4 * 12 * 12;
  CHECK(conv.forward_seconds == Approx(conv_flops / rates.gemm_flops));
  CHECK(conv.backward_seconds == Approx(2 * conv_flops / rates.gemm_flops));
  CHECK(input.layers[3].parameters == 8 * 4 * 9 + 8);
  CHECK_FALSE(input.layers[3].sufficient_factors);

  const topo::LayerProfile& dense = input.layers[5];  // 8 x 4 x 4 = 128 -> 32
  CHECK(dense.sufficient_factors);
  CHECK(dense.rows == 32);
  CHECK(dense.cols == 128);
  CHECK(dense.forward_seconds == Approx(kBatch * 2.0 * (128 * 32 + 32) / rates.gemm_flops));
  CHECK_FALSE(input.layers[4].sufficient_factors);  // flatten: no parameters
}

TEST_CASE("poseidon plans conv layers on PS, even with SFB forced on", "[sync][plan][cnn]") {
  tasks::Model model = small_cnn();
  for (const char* sfb : {"auto", "always"}) {
    INFO("sync.poseidon.sfb = " << sfb);
    const auto plan = plan_of(model, "poseidon", sfb);
    REQUIRE(plan.size() == model.num_layers());
    CHECK(plan[0].scheme == "PS");
    CHECK(plan[3].scheme == "PS");
    CHECK(plan[1].scheme == "-");  // relu, pool, flatten: nothing to send
    CHECK(plan[4].scheme == "-");
    if (std::string(sfb) == "always") {
      CHECK(plan[5].scheme == "SFB");
      CHECK(plan[7].scheme == "SFB");
    }
  }
}

TEST_CASE(
    "sealed frames: a B that planner.bandwidth gives pays the measured cipher, a probed B "
    "holds it already",
    "[sync][plan]") {
  CnnContext cnn;
  sync::JobMeasurements measured;
  measured.links = topo::LinkMatrix::uniform(kNodes, 50e-6, 4e8);
  measured.links.message_seconds.assign(kNodes, 10e-6);
  measured.cipher_seconds_per_byte = 1.0 / 7.5e8;  // seal + open at 750 MB/s
  sync::SyncContext& ctx = cnn.ctx;
  ctx.measured = &measured;
  const auto schemes = sync::strategy_traits("ps").schemes;
  CHECK(sync::planner_input(ctx, schemes).links.bandwidth[1] == 4e8);  // measured sealed
  ctx.options.planner.bandwidth = 1.25e9;  // 10 Gbit/s as given: 1 / (1/B + c)
  CHECK(sync::planner_input(ctx, schemes).links.bandwidth[1] ==
        Approx(1.0 / (1.0 / 1.25e9 + 1.0 / 7.5e8)));
  measured.cipher_seconds_per_byte = 0;  // in clear: B as given
  CHECK(sync::planner_input(ctx, schemes).links.bandwidth[1] == 1.25e9);
}

TEST_CASE("planner_input takes the compressor's measured times per layer and the 16-bit rates",
          "[sync][plan][compress]") {
  CnnContext cnn;
  tasks::Model& model = cnn.model;
  sync::SyncContext& ctx = cnn.ctx;
  const auto schemes = sync::strategy_traits("ps").schemes;
  for (const topo::LayerProfile& layer : sync::planner_input(ctx, schemes).layers) {
    CHECK_FALSE(layer.codec);  // nothing measured: the cost models' step multiples
  }
  sync::JobMeasurements measured;
  const std::size_t layers = model.num_layers();
  measured.encode_seconds.assign(layers, 0.0);
  measured.decode_seconds.assign(layers, 0.0);
  for (std::size_t l = 0; l < layers; ++l) {
    if (model.layer(l).parameter_count() == 0) continue;
    measured.encode_seconds[l] = 1e-3 * static_cast<double>(l + 1);
    measured.decode_seconds[l] = 1e-4 * static_cast<double>(l + 1);
  }
  measured.half_encode_seconds_per_float = 1.5e-9;
  measured.half_decode_seconds_per_float = 3e-10;
  ctx.measured = &measured;
  const topo::PlannerInput input = sync::planner_input(ctx, schemes);
  for (std::size_t l = 0; l < layers; ++l) {
    INFO("layer " << l);
    if (model.layer(l).parameter_count() == 0) {
      CHECK_FALSE(input.layers[l].codec);
      continue;
    }
    REQUIRE(input.layers[l].codec);
    CHECK(input.layers[l].codec->encode == measured.encode_seconds[l]);
    CHECK(input.layers[l].codec->decode == measured.decode_seconds[l]);
  }
  CHECK(input.half_encode_seconds_per_float == 1.5e-9);
  CHECK(input.half_decode_seconds_per_float == 3e-10);
}

TEST_CASE("planner_input takes the transport's measured work per byte and the plan charges it",
          "[sync][plan]") {
  CnnContext cnn;
  sync::SyncContext& ctx = cnn.ctx;
  const auto schemes = sync::strategy_traits("ps").schemes;
  CHECK(sync::planner_input(ctx, schemes).transport_seconds_per_byte == 0);  // not measured
  sync::JobMeasurements measured;
  measured.transport_seconds_per_byte = 5e-10;
  ctx.measured = &measured;
  const topo::PlannerInput input = sync::planner_input(ctx, schemes);
  CHECK(input.transport_seconds_per_byte == 5e-10);
  const topo::Plan plan = topo::make_plan(input);
  CHECK(plan.transport_seconds > 0);
  CHECK(plan.transport_seconds == Approx(2 * plan.bytes_sent * 5e-10));  // as many received
}
