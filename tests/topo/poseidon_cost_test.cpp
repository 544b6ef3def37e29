#include "topo/poseidon_cost.h"

#include <catch2/catch.hpp>

using namespace gradmesh::topo;

TEST_CASE("the cost model reproduces Poseidon's VGG19 figures", "[topo][poseidon]") {
  // ATC'17 sec. 3.2: a 4096 x 4096 FC layer, K = 32, P1 = P2 = 8: PS ~ 58.7M floats for a node
  // that is server and worker, SFB ~ 3.7M; BestScheme picks SFB.
  CHECK(ps_floats(4096, 4096, 8, 8) == Approx(58.72e6).epsilon(1e-3));
  CHECK(sfb_floats(32, 4096, 4096, 8) == Approx(3.67e6).epsilon(1e-3));
  CHECK(best_scheme(true, 4096, 4096, 32, 8, 8) == Scheme::kSfb);
  CHECK(to_string(Scheme::kSfb) == "SFB");
}

TEST_CASE("BestScheme keeps GoogLeNet's classifier on PS at K = 128 on 16 nodes",
          "[topo][poseidon]") {
  // ATC'17 sec. 5.2: for GoogLeNet's 1000 x 1024 FC layer SFB does not pay off.
  CHECK(ps_floats(1000, 1024, 16, 16) == Approx(3.84e6).epsilon(1e-3));
  CHECK(sfb_floats(128, 1000, 1024, 16) == Approx(7.77e6).epsilon(1e-3));
  CHECK(best_scheme(true, 1000, 1024, 128, 16, 16) == Scheme::kPs);
}

TEST_CASE("non-dense layers always use PS and one node sends nothing", "[topo][poseidon]") {
  CHECK(best_scheme(false, 4096, 4096, 1, 8, 8) == Scheme::kPs);
  CHECK(sfb_floats(32, 10, 10, 1) == 0.0);
  CHECK(ps_floats(10, 10, 1, 1) == 0.0);
}
