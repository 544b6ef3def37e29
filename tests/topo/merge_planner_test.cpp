// WFBP's timeline (MG-WFBP eqs. 6-8), Algorithm 1 as printed, and the exact merge planner,
// checked against brute force over every merge set.

#include "topo/merge_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"

using namespace gradmesh::topo;

namespace {

/// Every valid merge set of `layers` (layers whose merge partner is an all-reduce layer).
std::vector<std::vector<std::size_t>> all_merge_sets(const std::vector<WfbpLayer>& layers) {
  std::vector<std::size_t> candidates;
  for (std::size_t l = 1; l < layers.size(); ++l) {
    if (layers[l].allreduce_bytes <= 0) continue;
    std::size_t j = l;
    while (j-- > 0) {
      const WfbpLayer& below = layers[j];
      if (below.allreduce_bytes > 0 || below.comm_seconds > 0 || below.after_comm_seconds > 0)
        break;
    }
    if (j < l && layers[j].allreduce_bytes > 0) candidates.push_back(l);
  }
  std::vector<std::vector<std::size_t>> sets;
  for (std::size_t mask = 0; mask < (std::size_t{1} << candidates.size()); ++mask) {
    std::vector<std::size_t> set;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (mask & (std::size_t{1} << i)) set.push_back(candidates[i]);
    }
    sets.push_back(set);
  }
  return sets;
}

double brute_force_minimum(double forward, const std::vector<WfbpLayer>& layers,
                           AllReduceCost cost) {
  double best = std::numeric_limits<double>::infinity();
  for (const auto& set : all_merge_sets(layers)) {
    best = std::min(best, wfbp_iteration_seconds(forward, layers, cost, set));
  }
  return best;
}

/// A value spread over several orders of magnitude, so every WFBP case (hidden, partly hidden,
/// communication-bound) shows up.
double spread(std::mt19937& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_int_distribution<int> decade(-2, 1);
  return unit(rng) * std::pow(10.0, decade(rng));
}

}  // namespace

TEST_CASE("the WFBP timeline follows eqs. 6-8", "[topo][mgwfbp]") {
  // Two layers, t_f = 1, t_b = (2, 3), T_ar = 0.5 + 0.01 M.
  const AllReduceCost cost{0.5, 0.01};
  const std::vector<WfbpLayer> layers{{2, 100, 0, 0}, {3, 300, 0, 0}};
  const WfbpTimeline t = wfbp_timeline(1, layers, cost, {});
  CHECK(t.backward_start[1] == 1);            // tau_b^(L) = t_f
  CHECK(t.backward_start[0] == 4);            // + t_b^(L)
  CHECK(t.comm_start[1] == 4);                // tau_c^(L) = tau_b^(L) + t_b^(L)
  CHECK(t.comm_seconds[1] == Approx(3.5));    // T_ar(300)
  CHECK(t.comm_start[0] == Approx(7.5));      // max(4 + 3.5, 4 + 2)
  CHECK(t.iteration_seconds == Approx(9.0));  // eq. 8: tau_c^(1) + T_ar(100)
  // Merged (eqs. 14-16): one message of 400 bytes when layer 0 is ready at 6.
  const std::vector<std::size_t> merged{1};
  const WfbpTimeline m = wfbp_timeline(1, layers, cost, merged);
  CHECK(m.comm_seconds[1] == 0);
  CHECK(m.comm_start[0] == 6);
  CHECK(m.comm_seconds[0] == Approx(4.5));
  CHECK(m.iteration_seconds == Approx(10.5));
  // No layers: the forward pass alone.
  CHECK(wfbp_iteration_seconds(2, {}, cost, {}) == 2);
}

TEST_CASE("the exact merge planner finds the brute-force minimum over all 2^(L-1) merge sets",
          "[topo][mgwfbp]") {
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<std::size_t> depth(1, 10);
  for (int trial = 0; trial < 400; ++trial) {
    const std::size_t count = depth(rng);
    std::vector<WfbpLayer> layers(count);
    for (WfbpLayer& layer : layers) {
      layer.backward_seconds = spread(rng);
      layer.allreduce_bytes = 1e-3 + spread(rng);
    }
    const AllReduceCost cost{spread(rng), spread(rng)};
    const double forward = spread(rng);
    const double best = brute_force_minimum(forward, layers, cost);
    const auto merged = optimal_merge_set(forward, layers, cost);
    INFO("trial " << trial << ", L = " << count);
    CHECK(wfbp_iteration_seconds(forward, layers, cost, merged) ==
          Approx(best).epsilon(1e-12).margin(0));
    // Algorithm 1's set is a valid merge set, never better than the optimum.
    const auto greedy = mg_wfbp_merge_set(forward, layers, cost);
    CHECK(wfbp_iteration_seconds(forward, layers, cost, greedy) >= best * (1 - 1e-12));
  }
}

TEST_CASE("the exact merge planner is optimal with PS, SFB and local layers in the pipeline",
          "[topo][mgwfbp]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> depth(1, 10);
  std::uniform_int_distribution<int> kind(0, 5);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t count = depth(rng);
    std::vector<WfbpLayer> layers(count);
    for (WfbpLayer& layer : layers) {
      layer.backward_seconds = spread(rng);
      switch (kind(rng)) {
        case 0:  // local (a ReLU)
          break;
        case 1:  // PS
          layer.comm_seconds = spread(rng);
          break;
        case 2:  // SFB: communication, then the rebuild GEMM
          layer.comm_seconds = spread(rng);
          layer.after_comm_seconds = spread(rng);
          break;
        default:
          layer.allreduce_bytes = 1e-3 + spread(rng);
      }
    }
    const AllReduceCost cost{spread(rng), spread(rng)};
    const double forward = spread(rng);
    const double best = brute_force_minimum(forward, layers, cost);
    INFO("trial " << trial << ", L = " << count);
    CHECK(wfbp_iteration_seconds(forward, layers, cost, optimal_merge_set(forward, layers, cost)) ==
          Approx(best).epsilon(1e-12).margin(0));
  }
}

TEST_CASE("Algorithm 1 as printed can miss the optimum", "[topo][mgwfbp]") {
  // a = 1 s, b = 0.1 s/byte; layer 2 is large and ready at once, layers 1 and 0 are tiny and
  // follow 0.9 s apart (< a). Algorithm 1 merges 2 into 1 (ready 0.9 s after 2 could start) and
  // then 1 into 0, so all 102 bytes wait for layer 0: 1.8 + 1 + 10.2 = 13.0 s. Sending layer 2 at
  // once (0 .. 11 s) and merging 1 into 0 (11 .. 12.2 s) is better.
  const AllReduceCost cost{1.0, 0.1};
  const std::vector<WfbpLayer> layers{{0.9, 1, 0, 0}, {0.9, 1, 0, 0}, {0, 100, 0, 0}};
  const auto greedy = mg_wfbp_merge_set(0, layers, cost);
  CHECK(greedy == std::vector<std::size_t>{2, 1});
  CHECK(wfbp_iteration_seconds(0, layers, cost, greedy) == Approx(13.0));
  const auto best = optimal_merge_set(0, layers, cost);
  CHECK(best == std::vector<std::size_t>{1});
  CHECK(wfbp_iteration_seconds(0, layers, cost, best) == Approx(12.2));
  CHECK(brute_force_minimum(0, layers, cost) == Approx(12.2));
}

TEST_CASE(
    "Algorithm 1 merges nothing when communication hides (case 1) and small layers when "
    "start-up dominates (case 3)",
    "[topo][mgwfbp]") {
  // Case 1: every T_ar is shorter than the backward of the layer below.
  const std::vector<WfbpLayer> hidden{{1, 10, 0, 0}, {1, 10, 0, 0}, {1, 10, 0, 0}};
  const AllReduceCost fast{0.01, 0.001};
  CHECK(mg_wfbp_merge_set(0, hidden, fast).empty());
  CHECK(optimal_merge_set(0, hidden, fast).empty());
  CHECK(wfbp_iteration_seconds(0, hidden, fast, {}) == Approx(3 + fast.seconds(10)));  // eq. 11
  // Case 3 (Fig. 4): four small layers, start-up a larger than their backward steps.
  const std::vector<WfbpLayer> small{
      {0.1, 1, 0, 0}, {0.1, 1, 0, 0}, {0.1, 1, 0, 0}, {0.1, 1, 0, 0}};
  const AllReduceCost slow{1.0, 0.001};
  const auto greedy = mg_wfbp_merge_set(0, small, slow);
  CHECK(greedy == std::vector<std::size_t>{3, 2, 1});
  CHECK(optimal_merge_set(0, small, slow) == greedy);
  CHECK(wfbp_iteration_seconds(0, small, slow, greedy) == Approx(0.4 + slow.seconds(4)));
  CHECK(wfbp_iteration_seconds(0, small, slow, greedy) ==
        Approx(brute_force_minimum(0, small, slow)));
}

TEST_CASE("buckets never span a PS or SFB layer, local layers are skipped", "[topo][mgwfbp]") {
  const AllReduceCost slow{1.0, 0.001};
  // 3: all-reduce, 2: ReLU (local), 1: all-reduce, 0: PS.
  const std::vector<WfbpLayer> layers{
      {0.1, 0, 0.5, 0}, {0.1, 1, 0, 0}, {0.1, 0, 0, 0}, {0.1, 1, 0, 0}};
  const auto best = optimal_merge_set(0, layers, slow);
  CHECK(best == std::vector<std::size_t>{3});  // 3 into 1 across the ReLU
  CHECK(mg_wfbp_merge_set(0, layers, slow) == best);
  const std::vector<std::size_t> into_ps{1};
  CHECK_THROWS_AS(wfbp_timeline(0, layers, slow, into_ps), gradmesh::ContractError);
  const std::vector<std::size_t> lowest{0};
  CHECK_THROWS_AS(wfbp_timeline(0, layers, slow, lowest), gradmesh::ContractError);
  const std::vector<std::size_t> outside{9};
  CHECK_THROWS_WITH(wfbp_timeline(0, layers, slow, outside), Catch::Contains("= 9"));
}

TEST_CASE("bad pipeline inputs throw ContractError naming the value", "[topo][mgwfbp]") {
  const AllReduceCost cost{0.5, 0.01};
  std::vector<WfbpLayer> layers{{2, 100, 0, 0}, {-0.25, 300, 0, 0}};
  CHECK_THROWS_AS(optimal_merge_set(0, layers, cost), gradmesh::ContractError);
  CHECK_THROWS_WITH(mg_wfbp_merge_set(0, layers, cost),
                    Catch::Contains("layer 1 t_b") && Catch::Contains("-0.25"));
  layers[1].backward_seconds = 1;
  CHECK_THROWS_WITH(wfbp_timeline(-1, layers, cost, {}),
                    Catch::Contains("t_f") && Catch::Contains("-1"));
  layers[1].comm_seconds = 1;  // both all-reduce and PS
  CHECK_THROWS_AS(wfbp_timeline(0, layers, cost, {}), gradmesh::ContractError);
  layers[1].comm_seconds = 0;
  CHECK_THROWS_WITH(wfbp_timeline(0, layers, AllReduceCost{-2, 0}, {}), Catch::Contains("-2"));
}

TEST_CASE("work after communication queues on the node's compute, after the backward pass",
          "[topo][mgwfbp]") {
  const AllReduceCost unused{0, 0};
  // Two SFB layers (fixed): layer 1 sends for 0.5 s then rebuilds for 2 s, layer 0 sends for
  // 0.5 s then rebuilds for 1 s; t_b = 1 s each, t_f = 0.
  const std::vector<WfbpLayer> layers{{1, 0, 0.5, 1}, {1, 0, 0.5, 2}};
  const WfbpTimeline t = wfbp_timeline(0, layers, unused, {});
  CHECK(t.comm_start[1] == Approx(1));  // after layer 1's backward
  CHECK(t.comm_start[0] == Approx(2));  // after layer 0's backward
  // Layer 1's rebuild waits for the backward pass (ends at 2), takes 2 s; layer 0's waits for it.
  CHECK(t.iteration_seconds == Approx(2 + 2 + 1));
  // Side by side, as if each rebuild had cores of its own, it would have read max(4, 3.5) = 4.
  // A rebuild whose communication ends after the compute is free starts at its end.
  const std::vector<WfbpLayer> slow_link{{1, 0, 5, 1}, {1, 0, 5, 2}};
  // Layer 1 sends 1..6, rebuilds 6..8; layer 0 sends 6..11, rebuilds 11..12.
  CHECK(wfbp_iteration_seconds(0, slow_link, unused, {}) == Approx(12));
}

TEST_CASE("an all-reduce bucket's steps queue on the compute when the bucket has been reduced",
          "[topo][mgwfbp]") {
  const AllReduceCost cost{0.5, 0.01};  // T_ar(100 bytes) = 1.5 s
  // Layers 1 and 0: all-reduce, 100 bytes each, t_b = 1 s, steps of 0.25 s and 0.5 s.
  std::vector<WfbpLayer> layers{{1, 100, 0, 0.5}, {1, 100, 0, 0.25}};
  // Unmerged: layer 1 sends 1..2.5 and steps 2.5..2.75 (the backward pass ended at 2); layer 0
  // sends 2.5..4 and steps 4..4.5.
  CHECK(wfbp_iteration_seconds(0, layers, cost, {}) == Approx(4.5));
  // Merged: one bucket of 200 bytes sends 2..4.5, then both steps, 4.5..5.25.
  const std::vector<std::size_t> merged{1};
  CHECK(wfbp_iteration_seconds(0, layers, cost, merged) == Approx(5.25));
  // Without steps both are the link's times (eq. 8).
  for (WfbpLayer& layer : layers) layer.after_comm_seconds = 0;
  CHECK(wfbp_iteration_seconds(0, layers, cost, {}) == Approx(4));
  CHECK(wfbp_iteration_seconds(0, layers, cost, merged) == Approx(4.5));
}

TEST_CASE("the transport's work goes on the compute beside the backward pass, under the link",
          "[topo][mgwfbp]") {
  const AllReduceCost unused{0, 0};
  // Two PS layers (fixed): t_b = 1 s each, 0.5 s on the link each, 0.25 s of transport work each.
  std::vector<WfbpLayer> layers{{1, 0, 0.5, 0, 0.25}, {1, 0, 0.5, 0, 0.25}};
  // The link ends at 2.5 (layer 1 sends 1..1.5, layer 0 2..2.5); the compute at 2 + 0.5.
  CHECK(wfbp_iteration_seconds(0, layers, unused, {}) == Approx(2.5));
  // More work than the link hides: the compute ends the iteration.
  for (WfbpLayer& layer : layers) layer.transport_seconds = 1;
  CHECK(wfbp_iteration_seconds(0, layers, unused, {}) == Approx(4));
  // Work after communication (SFB's rebuild) queues behind it.
  layers[0].after_comm_seconds = 0.5;
  CHECK(wfbp_iteration_seconds(0, layers, unused, {}) == Approx(4.5));
  layers[1].transport_seconds = -1;
  CHECK_THROWS_WITH(wfbp_timeline(0, layers, unused, {}), Catch::Contains("transport"));
}

TEST_CASE("on the transport's shared link the lowest layer ready goes first, overtaking",
          "[topo][mgwfbp]") {
  const AllReduceCost unused{0, 0};
  const LinkSharing one_class{{1.0}};
  SECTION("ready together: the lower layer first, so the upper one's rebuild ends the iteration") {
    // Two SFB layers (fixed), t_f = 0, t_b = (0, 1): both ready at 1, 5 s on the link each;
    // layer 1 rebuilds for 2 s, layer 0 for 1 s.
    const std::vector<WfbpLayer> layers{{0, 0, 5, 1}, {1, 0, 5, 2}};
    const WfbpTimeline fifo = wfbp_timeline(0, layers, unused, {});
    CHECK(fifo.comm_end[1] == Approx(6));  // backward order: layer 1 sends 1..6, then layer 0
    CHECK(fifo.comm_end[0] == Approx(11));
    CHECK(fifo.iteration_seconds == Approx(12));  // layer 0's rebuild, 11..12
    const WfbpTimeline shared = wfbp_timeline(0, layers, unused, {}, one_class);
    CHECK(shared.comm_start[0] == Approx(1));
    CHECK(shared.comm_end[0] == Approx(6));
    CHECK(shared.comm_start[1] == Approx(6));
    CHECK(shared.comm_end[1] == Approx(11));
    CHECK(shared.comm_seconds[1] == Approx(5));  // its time alone on the link
    // Layer 0 rebuilds 6..7, layer 1 11..13: the link ends at 11 either way.
    CHECK(shared.iteration_seconds == Approx(13));
  }
  SECTION("a lower layer ready later overtakes the one part-sent") {
    // t_b = (1, 1): layer 1 ready at 1, layer 0 at 2; 5 s on the link each.
    const std::vector<WfbpLayer> layers{{1, 0, 5, 0}, {1, 0, 5, 0}};
    const WfbpTimeline t = wfbp_timeline(0, layers, unused, {}, one_class);
    CHECK(t.comm_start[1] == Approx(1));
    CHECK(t.comm_start[0] == Approx(2));
    CHECK(t.comm_end[0] == Approx(7));
    CHECK(t.comm_end[1] == Approx(11));  // 1 s sent before layer 0 was ready, 4 s after it
    CHECK(t.iteration_seconds == Approx(11));
  }
  SECTION("classes share by weight, a bucket at the layer that closes it") {
    // Layer 1: PS in class 0 (weight 3), 3 s on the link; layers 0 and 2 all-reduce in class 1
    // (weight 1), merged into one bucket of 200 bytes at 0.01 s a byte (2 s). All ready at 0.
    const AllReduceCost cost{0, 0.01};
    std::vector<WfbpLayer> layers{{0, 100, 0, 0}, {0, 0, 3, 0}, {0, 100, 0, 0}};
    layers[0].traffic_class = 1;
    layers[2].traffic_class = 1;
    // Layer 2 cannot merge across the PS layer: two buckets, layer 2's and layer 0's.
    const WfbpTimeline t = wfbp_timeline(0, layers, cost, {}, LinkSharing{{3.0, 1.0}});
    // Class 0 gets 3/4 of the link: layer 1's 3 s end at 4. Class 1 sends layer 0's bucket
    // first, its 1 s at 1/4 of the link: also by 4; then layer 2's bucket alone, 4..5.
    CHECK(t.comm_end[1] == Approx(4));
    CHECK(t.comm_end[0] == Approx(4));
    CHECK(t.comm_start[2] == Approx(4));
    CHECK(t.comm_end[2] == Approx(5));
    CHECK(t.iteration_seconds == Approx(5));  // the link's whole work, 3 + 1 + 1
  }
  SECTION("one class: the link's last end is first come first served's") {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<WfbpLayer> layers(5);
      for (WfbpLayer& layer : layers) {
        layer.backward_seconds = spread(rng);
        if (rng() % 3 == 0)
          layer.comm_seconds = spread(rng);
        else if (rng() % 2 == 0)
          layer.allreduce_bytes = 100 * spread(rng);
      }
      const AllReduceCost cost{spread(rng), spread(rng) / 100};
      const double forward = spread(rng);
      INFO("trial " << trial);
      CHECK(wfbp_iteration_seconds(forward, layers, cost, {}, one_class) ==
            Approx(wfbp_iteration_seconds(forward, layers, cost, {})));
    }
  }
  SECTION("bad weights and classes throw naming them") {
    std::vector<WfbpLayer> layers{{1, 0, 1, 0}};
    CHECK_THROWS_WITH(wfbp_timeline(0, layers, unused, {}, LinkSharing{{0.0}}),
                      Catch::Contains("traffic class 0 weight"));
    layers[0].traffic_class = 1;
    CHECK_THROWS_WITH(wfbp_timeline(0, layers, unused, {}, one_class),
                      Catch::Contains("layer 0 traffic class"));
  }
}
