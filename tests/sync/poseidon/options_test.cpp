// Tests for sync/poseidon/options.h: sync.poseidon.sfb and sync.poseidon.choose applied to the
// planner's input (Poseidon ATC'17 Algorithm 1 BestScheme when choose = bytes).

#include "sync/poseidon/options.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/error.h"
#include "topo/planner.h"
#include "topo/poseidon_cost.h"

using namespace gradmesh;

namespace {

topo::LayerProfile dense(std::size_t outputs, std::size_t inputs) {
  return topo::LayerProfile{"fc", outputs * inputs + outputs, true, outputs, inputs, 1e-3, 2e-3};
}

/// Strategy poseidon's input: PS or SFB (sync::StrategyTraits::schemes), a uniform link.
topo::PlannerInput poseidon_input(std::vector<topo::LayerProfile> layers, std::size_t batch,
                                  std::size_t nodes, double bandwidth, double gemm_flops) {
  topo::PlannerInput in;
  in.layers = std::move(layers);
  in.batch = batch;
  in.nodes = nodes;
  in.links = topo::LinkMatrix::uniform(nodes, 1e-4, bandwidth);
  in.gemm_flops = gemm_flops;
  in.frame_overhead_bytes = 64;
  in.schemes = {topo::ps_scheme_model(), topo::sfb_scheme_model()};
  return in;
}

topo::Plan plan_with(sync::PoseidonOptions options, topo::PlannerInput in) {
  sync::apply_poseidon_options(options, in);
  return topo::make_plan(in);
}

}  // namespace

TEST_CASE("choose = bytes reproduces topo::best_scheme, time may differ from it",
          "[sync][poseidon]") {
  for (std::size_t nodes : {2u, 4u, 8u, 16u}) {
    for (std::size_t batch : {1u, 32u, 128u, 1024u}) {
      for (auto [m, n] :
           {std::pair<std::size_t, std::size_t>{4096, 4096}, {1000, 1024}, {10, 256}, {256, 784}}) {
        const topo::PlannerInput in = poseidon_input({dense(m, n)}, batch, nodes, 1e9, 1e11);
        const bool sfb = topo::best_scheme(true, m, n, batch, nodes, nodes) == topo::Scheme::kSfb;
        INFO("n = " << nodes << ", K = " << batch << ", " << m << " x " << n);
        CHECK(plan_with({"auto", "bytes"}, in).layers[0].scheme ==
              (sfb ? topo::kSfbScheme : topo::kPsScheme));
      }
    }
  }
  // 5 GB/s and a slow GEMM: by time rebuilding dW costs more than sending it (PS); by bytes
  // BestScheme ignores the GEMM (SFB sends fewer floats).
  const topo::PlannerInput fast = poseidon_input({dense(4096, 4096)}, 64, 4, 5e9, 2e10);
  CHECK(plan_with({"auto", "time"}, fast).layers[0].scheme == topo::kPsScheme);
  CHECK(plan_with({"auto", "bytes"}, fast).layers[0].scheme == topo::kSfbScheme);
}

TEST_CASE("sfb = always fixes SFB, never removes it, and bad values name the key",
          "[sync][poseidon]") {
  // A layer without factors (a convolution's filters, say) stays on PS either way.
  topo::LayerProfile filters{"conv", 800, false, 0, 0, 1e-3, 2e-3};
  const topo::PlannerInput in =
      poseidon_input({dense(10, 256), filters, dense(4096, 4096)}, 64, 4, 12.5e6, 1e12);
  const topo::Plan always = plan_with({"always", "time"}, in);
  CHECK(always.layers[0].scheme == topo::kSfbScheme);  // PS would be cheaper alone
  CHECK(always.layers[1].scheme == topo::kPsScheme);
  CHECK(always.layers[2].scheme == topo::kSfbScheme);
  const topo::Plan never = plan_with({"never", "time"}, in);
  for (const auto& row : never.layers) CHECK(row.scheme == topo::kPsScheme);
  CHECK_FALSE(never.layers[2].costs.contains("sfb"));  // not even priced
  CHECK_THROWS_WITH(plan_with({"sometimes", "time"}, in),
                    Catch::Contains("sync.poseidon.sfb") && Catch::Contains("sometimes"));
  CHECK_THROWS_WITH(plan_with({"auto", "floats"}, in),
                    Catch::Contains("sync.poseidon.choose") && Catch::Contains("floats"));
  // One node: every layer local, whatever is fixed.
  topo::PlannerInput one = in;
  one.nodes = 1;
  one.links = topo::LinkMatrix::uniform(1, 0, 1);
  for (const auto& row : plan_with({"always", "bytes"}, one).layers) {
    CHECK(row.scheme == topo::kLocalScheme);
  }
}
