// The alpha-beta scheme costs: ring all-reduce (MG-WFBP eq. 9, Table II), PS over colocated KV
// shards (Poseidon sec. 4.1) and SFB (Poseidon sec. 2.1, 3.2), and the slowest link.

#include "topo/cost_model.h"

#include <cmath>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"

using namespace gradmesh::topo;

TEST_CASE("ring all-reduce: a = 2(n - 1) alpha, b = 2(n - 1)/(n B) (Table II)", "[topo][cost]") {
  const LinkCost link{1e-4, 1e9};
  const AllReduceCost cost = ring_allreduce_cost(link, 4);
  CHECK(cost.a == Approx(6e-4));
  CHECK(cost.b == Approx(1.5e-9));
  CHECK(cost.seconds(4e6) == Approx(6e-4 + 6e-3));  // 4 MB: 6 alpha + 1.5 x 4 MB / 1 GB/s
  // 2(n - 1)/n M bytes in 2(n - 1) messages: 6 MB + 6 frame headers of 100 bytes.
  CHECK(ring_allreduce_bytes(4e6, 4) == Approx(6e6));
  CHECK(ring_allreduce_bytes(4e6, 4, 100) == Approx(6e6 + 600));
  // A frame header costs its bytes at B on each of the 2(n - 1) steps: part of the start-up a.
  const AllReduceCost framed = ring_allreduce_cost(link, 4, 100);
  CHECK(framed.a == Approx(6 * (1e-4 + 100 / 1e9)));
  CHECK(framed.b == cost.b);
  const SchemeCost layer = allreduce_cost(ClusterCost{4, link, 100, 0}, 1'000'000);
  CHECK(layer.bytes_sent == Approx(6e6 + 600));
  CHECK(layer.messages == 6);
  CHECK(layer.comm_seconds == Approx(framed.seconds(4e6)));
  CHECK(layer.compute_seconds == 0);
  // T_ar(M1) + T_ar(M2) > T_ar(M1 + M2) (eq. 10): merging pays a once.
  CHECK(cost.seconds(1e3) + cost.seconds(2e3) > cost.seconds(3e3));
}

TEST_CASE("one node sends nothing and costs nothing", "[topo][cost]") {
  const LinkCost none{0, std::numeric_limits<double>::infinity()};
  CHECK(ring_allreduce_cost(none, 1).a == 0);
  CHECK(ring_allreduce_cost(none, 1).b == 0);
  CHECK(ring_allreduce_bytes(4e6, 1, 100) == 0);
  const ClusterCost one{1, none, 100, 0};
  CHECK(ps_cost(one, 1000, 256).bytes_sent == 0);
  CHECK(sfb_cost(one, 32, 10, 10).seconds() == 0);
  CHECK(allreduce_cost(one, 1000).seconds() == 0);
}

TEST_CASE("PS: 2(n - 1)/n of the layer and its chunk headers, two phases", "[topo][cost]") {
  const ClusterCost cluster{4, LinkCost{1e-3, 1e6}, 10, 0};
  // 1000 floats in chunks of 256: 4 chunks. Push 3/4 of them, broadcast the owned 1/4 to 3 peers.
  CHECK(chunks_of(1000, 256) == 4);
  CHECK(chunks_of(1024, 256) == 4);
  CHECK(chunks_of(0, 256) == 0);
  const SchemeCost cost = ps_cost(cluster, 1000, 256);
  CHECK(cost.bytes_sent == Approx(1.5 * (4000 + 4 * 10)));
  CHECK(cost.messages == Approx(6));
  CHECK(cost.comm_seconds == Approx(2e-3 + 6060 / 1e6));
  CHECK(cost.compute_seconds == 0);
  // Without headers it is 2 alpha + 2 (n - 1)/n M / B, the ring's bandwidth term with 2 alphas.
  const SchemeCost bare = ps_cost(ClusterCost{4, LinkCost{1e-3, 1e6}, 0, 0}, 1000, 256);
  CHECK(bare.comm_seconds == Approx(2e-3 + 1.5 * 4000 / 1e6));
  CHECK(bare.bytes_sent == Approx(ring_allreduce_bytes(4000, 4)));
  CHECK_THROWS_AS(ps_cost(cluster, 1000, 0), gradmesh::ContractError);
}

TEST_CASE("SFB: K (M + N) floats to n - 1 peers, then a 2 n K M N flop rebuild", "[topo][cost]") {
  const ClusterCost cluster{4, LinkCost{1e-4, 12.5e6}, 50, 1e12};
  const SchemeCost cost = sfb_cost(cluster, 32, 4096, 4096);
  const double bytes = 3 * (4.0 * 32 * 8192 + 50);
  CHECK(cost.bytes_sent == Approx(bytes));
  CHECK(cost.messages == 3);
  CHECK(cost.comm_seconds == Approx(1e-4 + bytes / 12.5e6));
  CHECK(cost.compute_seconds == Approx(2.0 * 4 * 32 * 4096 * 4096 / 1e12));
  CHECK(cost.seconds() == Approx(cost.comm_seconds + cost.compute_seconds));
  CHECK_THROWS_AS(sfb_cost(ClusterCost{4, LinkCost{1e-4, 12.5e6}, 50, 0}, 32, 10, 10),
                  gradmesh::ContractError);
}

TEST_CASE("the optimizer step: every node's after SFB and all-reduce, none on the link for PS",
          "[topo][cost]") {
  const ClusterCost cluster{4, LinkCost{1e-4, 12.5e6}, 50, 1e12, 2e-9};
  const double floats = 4096.0 * 4096 + 4096;
  const SchemeCost sfb = sfb_cost(cluster, 32, 4096, 4096);
  CHECK(sfb.compute_seconds == Approx(2.0 * 4 * 32 * 4096 * 4096 / 1e12 + floats * 2e-9));
  const SchemeCost ar = allreduce_cost(cluster, 4096 * 4096 + 4096);
  CHECK(ar.compute_seconds == Approx(floats * 2e-9));
  CHECK(ar.comm_seconds ==
        Approx(allreduce_cost(ClusterCost{4, LinkCost{1e-4, 12.5e6}, 50, 1e12}, 4096 * 4096 + 4096)
                   .comm_seconds));
  CHECK(ps_cost(cluster, 4096 * 4096 + 4096, 1 << 16).compute_seconds == 0);
  CHECK_THROWS_WITH(allreduce_cost(ClusterCost{4, LinkCost{1e-4, 12.5e6}, 50, 1e12, -1}, 10),
                    Catch::Contains("step") && Catch::Contains("-1"));
}

TEST_CASE("the formulas use the slowest link: max alpha, min B, the diagonal is unused",
          "[topo][cost]") {
  LinkMatrix links = LinkMatrix::uniform(3, 1e-4, 1e9);
  links.alpha[0 * 3 + 2] = 5e-4;     // 0 -> 2 is slow to start
  links.bandwidth[2 * 3 + 1] = 2e8;  // 2 -> 1 is narrow
  links.alpha[1 * 3 + 1] = -1;       // diagonal: ignored
  links.bandwidth[0] = 0;
  const LinkCost slowest = slowest_link(links);
  CHECK(slowest.alpha == 5e-4);
  CHECK(slowest.bandwidth == 2e8);
  const LinkCost alone = slowest_link(LinkMatrix::uniform(1, 0, 0));
  CHECK(alone.alpha == 0);
  CHECK(std::isinf(alone.bandwidth));
}

TEST_CASE("per-message overhead o: every message of a phase, every ring step", "[topo][cost]") {
  const double o = 2e-5;
  const ClusterCost cluster{4, LinkCost{1e-3, 1e6, o}, 10, 1e12};
  // PS: 6 messages in two phases of 3: each phase alpha + 3 o + its bytes.
  const SchemeCost ps = ps_cost(cluster, 1000, 256);
  CHECK(ps.comm_seconds == Approx(2e-3 + 6 * o + 6060 / 1e6));
  CHECK(ps.bytes_sent ==
        Approx(ps_cost(ClusterCost{4, LinkCost{1e-3, 1e6}, 10, 0}, 1000, 256).bytes_sent));
  // SFB: one phase of n - 1 = 3 messages.
  const SchemeCost sfb = sfb_cost(cluster, 32, 10, 10);
  CHECK(sfb.comm_seconds == Approx(1e-3 + 3 * o + sfb.bytes_sent / 1e6));
  // The ring: 2(n - 1) = 6 phases of one message each.
  CHECK(allreduce_cost(cluster, 1000).comm_seconds ==
        Approx(allreduce_cost(ClusterCost{4, LinkCost{1e-3, 1e6}, 10, 0}, 1000).comm_seconds +
               6 * o));
  // The slowest link takes the largest o over the nodes.
  LinkMatrix links = LinkMatrix::uniform(3, 1e-4, 1e9);
  links.message_seconds = {1e-5, 4e-5, 2e-5};
  CHECK(slowest_link(links).message_seconds == 4e-5);
  links.message_seconds = {1e-5, -1, 2e-5};
  CHECK_THROWS_WITH(slowest_link(links), Catch::Contains("message overhead o[1]"));
  links.message_seconds = {1e-5};
  CHECK_THROWS_WITH(slowest_link(links), Catch::Contains("message overhead vector"));
  CHECK_THROWS_AS(ps_cost(ClusterCost{4, LinkCost{1e-3, 1e6, -o}, 10, 0}, 1000, 256),
                  gradmesh::ContractError);
}

TEST_CASE("bad links and node counts throw ContractError naming the value", "[topo][cost]") {
  LinkMatrix links = LinkMatrix::uniform(2, 1e-4, 1e9);
  links.bandwidth[1] = -5;
  CHECK_THROWS_AS(slowest_link(links), gradmesh::ContractError);
  CHECK_THROWS_WITH(slowest_link(links),
                    Catch::Contains("bandwidth B[0][1]") && Catch::Contains("= -5"));
  links.bandwidth[1] = 0;
  CHECK_THROWS_WITH(slowest_link(links), Catch::Contains("= 0"));
  links = LinkMatrix::uniform(2, -1e-3, 1e9);
  CHECK_THROWS_WITH(slowest_link(links),
                    Catch::Contains("alpha[0][1]") && Catch::Contains("-0.001"));
  links = LinkMatrix::uniform(0, 1e-4, 1e9);
  CHECK_THROWS_WITH(slowest_link(links), Catch::Contains("nodes n = 0"));
  links = LinkMatrix::uniform(3, 1e-4, 1e9);
  links.alpha.pop_back();
  CHECK_THROWS_WITH(slowest_link(links), Catch::Contains("= 8"));
  CHECK_THROWS_WITH(ring_allreduce_cost(LinkCost{1e-4, 0}, 4), Catch::Contains("= 0"));
  CHECK_THROWS_WITH(ring_allreduce_bytes(1, 0), Catch::Contains("nodes n = 0"));
}

namespace {

/// `sites` sites of the given hosts, ranks site by site (or as `order` says); every pair 1 GB/s,
/// alpha 1 ms across sites and 0.1 ms inside; uplinks as given.
LinkMatrix sites_of(const std::vector<std::size_t>& site, const std::vector<double>& uplink) {
  const std::size_t n = site.size();
  LinkMatrix m = LinkMatrix::uniform(n, 1e-4, 1e9);
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = 0; b < n; ++b) {
      if (site[a] != site[b]) m.alpha[a * n + b] = 1e-3;
    }
  }
  m.site = site;
  m.site_uplink = uplink;
  return m;
}

}  // namespace

TEST_CASE("sites: each collective sees the share of the uplinks its traffic leaves a node",
          "[topo][cost][sites]") {
  // Two sites of 4, 100 MB/s uplinks, 1 GB/s inside (simulate --links).
  const LinkMatrix two = sites_of({0, 0, 0, 0, 1, 1, 1, 1}, {1e8, 1e8});
  // The ring in rank order leaves each site once: one flow on each uplink, B = the uplink.
  const LinkCost ring = traffic_link(two, Traffic::kRing);
  CHECK(ring.alpha == 1e-3);  // the slowest pair's alpha, as slowest_link
  CHECK(ring.bandwidth == 1e8);
  // All to all: the 4 nodes of a site send 4 of their 7 messages out: 16/7 of a node's bytes on
  // its uplink, so B = 1e8 x 7 / 16.
  CHECK(traffic_link(two, Traffic::kAllToAll).bandwidth == Approx(1e8 * 7.0 / 16.0));
  // The star: rank 0 sends 4 of its 7 messages over its site's uplink; the other site's uplink
  // carries 4 of the 7 to it: B = 1e8 x 7 / 4.
  CHECK(traffic_link(two, Traffic::kStar).bandwidth == Approx(1e8 * 7.0 / 4.0));
  // Bytes crossing the boundary an iteration, all nodes together, for 700 bytes a node.
  CHECK(inter_site_bytes(two, Traffic::kRing, 700) == Approx(1400));  // 2 hops cross
  CHECK(inter_site_bytes(two, Traffic::kAllToAll, 700) == Approx(2 * 16 * 100));
  CHECK(inter_site_bytes(two, Traffic::kStar, 700) == Approx(2 * 4 * 100));

  // Ranks of the sites interleaved: the ring crosses at every hop, 4 flows on each uplink.
  const LinkMatrix interleaved = sites_of({0, 1, 0, 1, 0, 1, 0, 1}, {1e8, 1e8});
  CHECK(traffic_link(interleaved, Traffic::kRing).bandwidth == Approx(2.5e7));
  CHECK(inter_site_bytes(interleaved, Traffic::kRing, 700) == Approx(8 * 700));
  // All to all does not care about the order.
  CHECK(traffic_link(interleaved, Traffic::kAllToAll).bandwidth ==
        traffic_link(two, Traffic::kAllToAll).bandwidth);

  // An uplink faster than what it carries leaves the pairs' B.
  const LinkMatrix fat = sites_of({0, 0, 1, 1}, {1e12, 1e12});
  for (const Traffic t : {Traffic::kRing, Traffic::kAllToAll, Traffic::kStar})
    CHECK(traffic_link(fat, t).bandwidth == 1e9);
  // No sites: slowest_link for every traffic, and nothing crosses.
  const LinkMatrix flat = LinkMatrix::uniform(4, 1e-4, 1e9);
  for (const Traffic t : {Traffic::kRing, Traffic::kAllToAll, Traffic::kStar}) {
    CHECK(traffic_link(flat, t).bandwidth == slowest_link(flat).bandwidth);
    CHECK(inter_site_bytes(flat, t, 700) == 0);
  }
  // Unequal sites: the worst one bounds B (all to all: 1 node alone sends 6/6 of its bytes
  // across; the 6 nodes of the other 6 x 1 / 6).
  const LinkMatrix lopsided = sites_of({0, 1, 1, 1, 1, 1, 1}, {1e8, 1e8});
  CHECK(traffic_link(lopsided, Traffic::kAllToAll).bandwidth == Approx(1e8));
  // A bad site vector is a contract error.
  LinkMatrix bad = two;
  bad.site.pop_back();
  CHECK_THROWS_AS(traffic_link(bad, Traffic::kRing), gradmesh::ContractError);
  bad = two;
  bad.site[7] = 2;  // no uplink for site 2
  CHECK_THROWS_AS(traffic_link(bad, Traffic::kAllToAll), gradmesh::ContractError);
}

TEST_CASE("sites: PS and SFB pay the shared uplink, the ring pays one flow on it",
          "[topo][cost][sites]") {
  const LinkMatrix two = sites_of({0, 0, 0, 0, 1, 1, 1, 1}, {1e8, 1e8});
  ClusterCost cluster{8, traffic_link(two, Traffic::kRing), 0, 1e12, 0};
  cluster.all_to_all_link = traffic_link(two, Traffic::kAllToAll);
  const SchemeCost ps = ps_cost(cluster, 1'000'000, 1'000'000 / 8);
  // 2 (n - 1)/n M bytes in two phases, each at the all-to-all B.
  CHECK(ps.comm_seconds ==
        Approx(2 * (1e-3 + (ps.bytes_sent / 2) / (1e8 * 7.0 / 16.0))).epsilon(1e-9));
  const SchemeCost ring = allreduce_cost(cluster, 1'000'000);
  CHECK(ring.comm_seconds == Approx(ring_allreduce_cost(LinkCost{1e-3, 1e8}, 8).seconds(4e6)));
  const SchemeCost sfb = sfb_cost(cluster, 32, 1000, 1000);
  CHECK(sfb.comm_seconds == Approx(1e-3 + sfb.bytes_sent / (1e8 * 7.0 / 16.0)));
  CHECK(cluster.link_for(Traffic::kStar).bandwidth == 1e8);  // unset: the ring's link
}
