// Tests of gradmesh-node's planning subcommands (apps/node/planning.h): `simulate` gives the
// planner's own predictions (the same numbers `plan` prints for a node count), covers 2 to 1,024
// nodes, predicts local's rounds, reads a device profile written by `profile`, and refuses what
// it cannot predict, naming it.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/apps/node/cluster.h"
#include "tests/support/process.h"

namespace {

std::string demo_config() {
  return std::string(GRADMESH_SOURCE_DIR) + "/configs/fashion-mnist-mlp.toml";
}

struct Run {
  int status = -1;
  std::string text;
};

/// gradmesh-node with `args` (after the binary), its output; planner.probe=false so that every
/// figure comes from the planner's assumed rates (the same on every machine and run).
Run node_command(const std::string& name, const std::vector<std::string>& args) {
  const auto dir = gradmesh::testing::fresh_directory("planning-" + name);
  std::vector<std::string> argv{GRADMESH_NODE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--set", "planner.probe=false"});
  gradmesh::testing::Process process(argv, dir / "out.txt");
  Run run;
  run.status = process.wait_for(std::chrono::seconds(120)).value_or(-1);
  run.text = gradmesh::testing::read_file(dir / "out.txt");
  return run;
}

/// The JSON document in `text` (simulate --json prints it alone on stdout; log lines go before).
nlohmann::json json_in(const std::string& text) {
  return nlohmann::json::parse(text.substr(text.find("{\n")));
}

}  // namespace

TEST_CASE("simulate predicts for n nodes what plan predicts for them, by the same function",
          "[e2e][plan][simulate]") {
  for (const std::string strategy : {"auto", "allreduce", "ps"}) {
    INFO(strategy);
    const Run plan = node_command("plan-" + strategy,
                                  {"plan", "--config", demo_config(), "--nodes", "4", "--bandwidth",
                                   "100mbit", "--set", "sync.strategy=" + strategy});
    INFO(plan.text);
    REQUIRE(plan.status == 0);
    std::smatch m;
    REQUIRE(std::regex_search(
        plan.text, m, std::regex(R"(predicted: (\d+) bytes sent per iteration, ([0-9.]+) ms)")));
    const double plan_bytes = std::stod(m[1]), plan_ms = std::stod(m[2]);
    const Run sim = node_command("simulate-" + strategy,
                                 {"simulate", "--config", demo_config(), "--nodes", "2,4",
                                  "--bandwidth", "100mbit", "--strategy", strategy, "--json"});
    INFO(sim.text);
    REQUIRE(sim.status == 0);
    const nlohmann::json doc = json_in(sim.text);
    REQUIRE(doc["runs"].size() == 2);
    const nlohmann::json& four = doc["runs"][1];
    CHECK(four["nodes"] == 4);
    CHECK(four["strategy"] == strategy);
    // plan prints milliseconds with 3 decimals and whole bytes.
    CHECK(std::abs(four["iteration_seconds"].get<double>() * 1e3 - plan_ms) <= 0.0005 + 1e-9);
    CHECK(std::abs(four["bytes_per_iteration"].get<double>() - plan_bytes) <= 0.5);
    const double iteration = four["iteration_seconds"].get<double>();
    CHECK(four["samples_per_second"].get<double>() == Approx(4 * 64 / iteration));
    CHECK(four["efficiency"].get<double>() ==
          Approx(doc["one_node_iteration_seconds"].get<double>() / iteration));
    // At 100 Mbit/s the demo MLP's exchange dominates its 1 ms of compute.
    for (const auto& run : doc["runs"]) CHECK(run["efficiency"].get<double>() < 0.5);
  }
}

TEST_CASE("simulate covers 2 to 1,024 nodes by default, and local's rounds",
          "[e2e][plan][simulate]") {
  const Run sim = node_command(
      "default-counts", {"simulate", "--config", demo_config(), "--bandwidth", "1gbit", "--json"});
  INFO(sim.text);
  REQUIRE(sim.status == 0);
  const nlohmann::json doc = json_in(sim.text);
  REQUIRE(doc["runs"].size() == 10);
  std::size_t n = 2;
  for (const auto& run : doc["runs"]) {
    CHECK(run["nodes"] == n);
    CHECK(run["iteration_seconds"].get<double>() > 0);
    CHECK(run["plan_seconds"].get<double>() >= 0);
    n *= 2;
  }
  // local: the round's iteration is t_c / utilization, H in the plan's word.
  const Run local = node_command(
      "local", {"simulate", "--config", demo_config(), "--nodes", "4", "--bandwidth", "10mbit",
                "--strategy", "local", "--set", "sync.local.steps=50", "--json"});
  INFO(local.text);
  REQUIRE(local.status == 0);
  const nlohmann::json l = json_in(local.text)["runs"][0];
  CHECK(l["plan"] == "H=50");
  CHECK(l["efficiency"].get<double>() < 1.0);
  CHECK(l["bytes_per_iteration"].get<double>() > 0);
  // The table names its columns.
  const Run table = node_command("table", {"simulate", "--config", demo_config(), "--nodes", "8"});
  INFO(table.text);
  REQUIRE(table.status == 0);
  CHECK_THAT(table.text, Catch::Contains("samples/s") && Catch::Contains("scaling"));
}

TEST_CASE("simulate --device runs every part of the compute at the device's rate",
          "[e2e][plan][simulate]") {
  // planner.probe=false: this machine's figures are the planner's assumed rates (GEMM 2e10
  // FLOP/s, step 2 ns a float); a device reaching 1e12 FLOP/s runs layers and step 50x faster.
  const auto one_node = [](const std::vector<std::string>& more) {
    std::vector<std::string> args{"simulate", "--config", demo_config(), "--nodes", "4", "--json"};
    args.insert(args.end(), more.begin(), more.end());
    const Run run = node_command("device", args);
    INFO(run.text);
    REQUIRE(run.status == 0);
    return json_in(run.text);
  };
  const nlohmann::json here = one_node({});
  const nlohmann::json device = one_node({"--device", "2tflops:0.5"});
  CHECK(device["device_flops"].get<double>() == Approx(1e12));
  CHECK(device["one_node_iteration_seconds"].get<double>() * 50 ==
        Approx(here["one_node_iteration_seconds"].get<double>()).epsilon(1e-9));
  // A faster device leaves more of the iteration to the network: lower scaling.
  CHECK(device["runs"][0]["efficiency"].get<double>() <
        here["runs"][0]["efficiency"].get<double>());
  // A single-node throughput gives the rate: one node alone then takes batch / that.
  const nlohmann::json paper = one_node({"--images-per-second", "35.5"});
  CHECK(paper["one_node_iteration_seconds"].get<double>() == Approx(64.0 / 35.5).epsilon(1e-9));
  CHECK(paper["device_flops"].get<double>() > 0);
  const Run both = node_command("both", {"simulate", "--config", demo_config(), "--nodes", "4",
                                         "--device", "1tflops:1", "--images-per-second", "10"});
  CHECK(both.status == 2);
  CHECK_THAT(both.text, Catch::Contains("give one"));
  for (const std::string bad : {"6.1gflop:0.5", "6.1tflops:1.5", "0tflops:0.5", "fast"}) {
    const Run run = node_command(
        "bad-device", {"simulate", "--config", demo_config(), "--nodes", "4", "--device", bad});
    INFO(run.text);
    CHECK(run.status == 2);
    CHECK_THAT(run.text, Catch::Contains("--device " + bad));
  }
}

TEST_CASE("simulate refuses what it cannot predict, naming it", "[e2e][plan][simulate]") {
  const Run one = node_command("one-node", {"simulate", "--config", demo_config(), "--nodes", "1"});
  CHECK(one.status == 2);
  CHECK_THAT(one.text, Catch::Contains("--nodes: 1"));
  const Run ako = node_command(
      "ako", {"simulate", "--config", demo_config(), "--nodes", "4", "--strategy", "ako"});
  CHECK(ako.status == 2);
  CHECK_THAT(ako.text, Catch::Contains("'ako' predicts no iteration time"));
  const Run unknown = node_command(
      "unknown", {"simulate", "--config", demo_config(), "--nodes", "4", "--strategy", "gossip"});
  CHECK(unknown.status == 2);
  CHECK_THAT(unknown.text, Catch::Contains("gossip"));
}

namespace {

/// A links file of sites of `hosts` hosts each, 1 Gbit/s inside, `uplink` between, alpha 100 us
/// everywhere (the planner's assumed alpha, as --bandwidth takes it).
std::string links_file(const std::string& name, const std::vector<int>& hosts,
                       const std::string& uplink) {
  const auto path = gradmesh::testing::fresh_directory("planning-links") / (name + ".toml");
  std::ofstream out(path);
  out << "[intra]\nalpha = 1e-4\nbandwidth = \"1gbit\"\n[inter]\nalpha = 1e-4\nbandwidth = \""
      << uplink << "\"\n";
  for (std::size_t s = 0; s < hosts.size(); ++s)
    out << "[[site]]\nname = \"s" << s << "\"\nhosts = " << hosts[s] << "\n";
  return path.string();
}

}  // namespace

TEST_CASE(
    "simulate --links: one site is --bandwidth, and across sites the ring crosses twice and "
    "all-to-all traffic shares the uplinks",
    "[e2e][plan][simulate][links]") {
  const auto run = [](const std::string& name, std::vector<std::string> args) {
    std::vector<std::string> argv{"simulate", "--config", demo_config(), "--json"};
    argv.insert(argv.end(), args.begin(), args.end());
    const Run r = node_command(name, argv);
    INFO(r.text);
    REQUIRE(r.status == 0);
    return json_in(r.text);
  };
  // One site: the same links as one rate, so the same prediction (up to --bandwidth's rounding
  // through 1 / (1 / B)).
  const nlohmann::json one =
      run("one-site", {"--links", links_file("one", {4}, "10mbit"), "--strategy", "ps,allreduce"});
  const nlohmann::json flat =
      run("flat", {"--bandwidth", "1gbit", "--nodes", "4", "--strategy", "ps,allreduce"});
  REQUIRE(one["runs"].size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(one["runs"][i]["iteration_seconds"].get<double>() ==
          Approx(flat["runs"][i]["iteration_seconds"].get<double>()).epsilon(1e-12));
    CHECK(one["runs"][i]["bytes_per_iteration"] == flat["runs"][i]["bytes_per_iteration"]);
    CHECK(one["runs"][i]["inter_site_bytes_per_iteration"] == 0);
  }
  CHECK_THAT(one["links"].get<std::string>(), Catch::Contains("1 site (s0 4 hosts)"));
  // Two sites of 4 joined by 100 Mbit/s uplinks.
  const std::string two_sites = links_file("two", {4, 4}, "100mbit");
  const nlohmann::json two = run("two-sites", {"--links", two_sites, "--strategy", "ps,allreduce"});
  REQUIRE(two["runs"].size() == 2);
  const nlohmann::json& ps = two["runs"][0];
  const nlohmann::json& ring = two["runs"][1];
  CHECK(ps["nodes"] == 8);
  // The ring in rank order crosses the boundary twice, each hop what a node sends; PS's pushes
  // and broadcasts go to every node, 4 x 4 / 7 of a node's bytes out of each site.
  CHECK(ring["inter_site_bytes_per_iteration"].get<double>() ==
        Approx(2 * ring["bytes_per_iteration"].get<double>()));
  // (bytes_per_iteration is rank 0's, which differs from the nodes' mean by its share of the KV
  // chunks: within 1% here.)
  CHECK(ps["inter_site_bytes_per_iteration"].get<double>() ==
        Approx(2 * 16.0 / 7.0 * ps["bytes_per_iteration"].get<double>()).epsilon(0.01));
  // The ring sees one flow on each uplink: as 8 nodes at 100 Mbit/s.
  const nlohmann::json slow =
      run("slow", {"--bandwidth", "100mbit", "--nodes", "8", "--strategy", "ps,allreduce"});
  CHECK(ring["iteration_seconds"].get<double>() ==
        Approx(slow["runs"][1]["iteration_seconds"].get<double>()).epsilon(1e-12));
  // PS's all-to-all bytes share the uplink: slower than 8 nodes each at 100 Mbit/s.
  CHECK(ps["iteration_seconds"].get<double>() > slow["runs"][0]["iteration_seconds"].get<double>());
  // The table has the inter-site column and names the links.
  const Run table = node_command("links-table", {"simulate", "--config", demo_config(), "--links",
                                                 two_sites, "--strategy", "allreduce"});
  INFO(table.text);
  REQUIRE(table.status == 0);
  CHECK_THAT(table.text, Catch::Contains("inter-site/it") &&
                             Catch::Contains("2 sites (s0 4 hosts, s1 4 hosts)"));
  // --links with another node count or a second source of links is refused, naming both.
  const Run nodes = node_command(
      "links-nodes", {"simulate", "--config", demo_config(), "--links", two_sites, "--nodes", "4"});
  CHECK(nodes.status == 2);
  CHECK_THAT(nodes.text, Catch::Contains("has 8 hosts"));
  const Run both = node_command("links-both", {"simulate", "--config", demo_config(), "--links",
                                               two_sites, "--bandwidth", "1gbit"});
  CHECK(both.status == 2);
  CHECK_THAT(both.text, Catch::Contains("--links and --bandwidth"));
}

TEST_CASE("profile writes this machine's compute, and simulate --device FILE predicts from it",
          "[e2e][plan][simulate]") {
  const auto dir = gradmesh::testing::fresh_directory("planning-profile-file");
  const std::string file = (dir / "mlp.toml").string();
  const Run written = node_command("profile", {"profile", "--config", demo_config(), "-o", file});
  INFO(written.text);
  REQUIRE(written.status == 0);
  CHECK_THAT(written.text,
             Catch::Contains("wrote " + file + ": job 'fashion-mnist-mlp', 5 layers"));
  // The same profile with every time doubled and the GEMM rate halved: one node's predicted
  // iteration is exactly twice as long (the planner reads the file's figures, nothing else).
  std::string text = gradmesh::testing::read_file(file);
  std::string doubled;
  const std::regex value(R"(^(\w*seconds\w*|gemm_flops) = (\S+)$)");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, value)) {
      const double v = std::stod(m[2].str());
      char buffer[64];
      std::snprintf(buffer, sizeof buffer, "%.17g", m[1].str() == "gemm_flops" ? v / 2 : v * 2);
      line = m[1].str() + " = " + buffer;
    }
    doubled += line + "\n";
  }
  const std::string slower = (dir / "slower.toml").string();
  std::ofstream(slower) << doubled;
  const auto simulated = [](const std::string& profile) {
    const Run run = node_command("with-profile", {"simulate", "--config", demo_config(), "--nodes",
                                                  "4", "--device", profile, "--json"});
    INFO(run.text);
    REQUIRE(run.status == 0);
    return json_in(run.text);
  };
  const nlohmann::json fast = simulated(file);
  const nlohmann::json slow = simulated(slower);
  CHECK_THAT(fast["device_profile"].get<std::string>(), Catch::Contains(file));
  CHECK(fast["measured_here"].get<bool>() == false);
  CHECK(slow["one_node_iteration_seconds"].get<double>() ==
        Approx(2 * fast["one_node_iteration_seconds"].get<double>()).epsilon(1e-12));
  // Another job's profile, and a --device that is neither a file nor a rate, are refused.
  const Run cnn = node_command(
      "profile-cnn",
      {"simulate", "--config", std::string(GRADMESH_SOURCE_DIR) + "/configs/fashion-mnist-cnn.toml",
       "--nodes", "4", "--device", file});
  CHECK(cnn.status == 2);
  CHECK_THAT(cnn.text, Catch::Contains("has 5 layers, this job's model"));
  const Run missing = node_command("profile-missing", {"simulate", "--config", demo_config(),
                                                       "--nodes", "4", "--device", file + ".x"});
  CHECK(missing.status == 2);
  CHECK_THAT(missing.text, Catch::Contains("nor is it a device profile file"));
}
