// End-to-end: every BSP strategy starts and trains on a slow link. Two gradmesh-node processes on
// 127.0.0.1 with net.max_send_rate = 1 Mbit/s (the transport's token bucket: a link as slow as
// the kernel-shaped 1 Mbit links of bench/netns.sh, where a fixed 4 MiB probe transfer once
// took 34 s and no strategy got past start-up).

#include <catch2/catch.hpp>
#include <regex>
#include <string>

#include "tests/apps/node/cluster.h"

using gradmesh::testing::Cluster;

namespace {

constexpr double kRate = 125e3;  // bytes/s: 1 Mbit/s

// Starts the demo MLP (configs/fashion-mnist-mlp.toml) on 2 nodes under `strategy` at kRate for
// 5 iterations and checks that it ran, measured the link and started quickly.
void run_on_slow_link(const std::string& strategy) {
  const std::string config = gradmesh::testing::read_file(std::string(GRADMESH_SOURCE_DIR) +
                                                          "/configs/fashion-mnist-mlp.toml");
  Cluster cluster("slow-link-" + strategy, 2, config);
  cluster.start({"--set", "sync.strategy=" + strategy, "--set", "net.max_send_rate=1mbit", "--set",
                 "job.max_iterations=5"});
  // ps sends ~1.1 MB per node per iteration: ~45 s at 1 Mbit/s for 5 iterations and evaluation.
  const auto codes = cluster.wait(std::chrono::seconds(240));
  INFO(cluster.all_logs());
  REQUIRE(codes == std::vector<int>{0, 0});
  for (std::size_t rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const auto metrics = cluster.metrics(rank);
    CHECK(metrics["iterations"] == 5);
    CHECK(metrics["strategy"] == strategy);
    // The probe measured the capped link (the plan's B), within 20%.
    const double bandwidth = metrics["sync"]["bandwidth"].get<double>();
    CHECK(bandwidth > 0.8 * kRate);
    CHECK(bandwidth < 1.2 * kRate);
    // It took its budget (1.5 s) and some, not the 3.4 s per round a 4 MiB transfer needs at 10
    // Mbit/s, let alone 34 s at 1.
    const std::string log = cluster.log_text(rank);
    std::smatch took;
    REQUIRE(std::regex_search(log, took, std::regex(R"(link probe took ([0-9.]+) s)")));
    CHECK(std::stod(took[1]) < 3.0);
    CHECK(log.find("link to rank " + std::to_string(1 - rank)) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("ps starts and trains on a 1 Mbit/s link", "[e2e][slow-link]") { run_on_slow_link("ps"); }

TEST_CASE("poseidon starts and trains on a 1 Mbit/s link", "[e2e][slow-link]") {
  run_on_slow_link("poseidon");
}

TEST_CASE("allreduce starts and trains on a 1 Mbit/s link", "[e2e][slow-link]") {
  run_on_slow_link("allreduce");
}

TEST_CASE("auto starts and trains on a 1 Mbit/s link", "[e2e][slow-link]") {
  run_on_slow_link("auto");
}
