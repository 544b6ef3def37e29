// Tests for apps/node/links_file.h (issue 58, item 2): a links file read into sites, the ranks
// site by site (so the ring crosses each site boundary once), the pairs' links and the uplinks;
// a bad file refused naming its file, line and key.

#include "apps/node/links_file.h"

#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "tests/support/process.h"

using gradmesh::ConfigError;
using gradmesh::app::read_links_file;
using gradmesh::app::SiteLinks;

namespace {

std::filesystem::path write_text(const std::string& name, const std::string& text) {
  const auto path = gradmesh::testing::fresh_directory("links-file") / name;
  std::ofstream(path) << text;
  return path;
}

const char* const kTwoSites = R"(# two sites
[intra]
alpha = 5e-5
bandwidth = "10gbit"
[inter]
alpha = 0.02
bandwidth = "1gbit"
[[site]]
name = "eu"
hosts = 3
[[site]]
name = "us"
hosts = 2
bandwidth = "500mbit"
)";

}  // namespace

TEST_CASE("a links file gives the sites in rank order, their pairs and uplinks", "[links]") {
  const SiteLinks links = read_links_file(write_text("two.toml", kTwoSites));
  REQUIRE(links.sites.size() == 2);
  CHECK(links.sites[0].name == "eu");
  CHECK(links.sites[0].hosts == 3);
  CHECK(links.sites[0].uplink == 1.25e8);  // inter.bandwidth, bytes/s
  CHECK(links.sites[1].uplink == 6.25e7);  // its own
  CHECK(links.nodes() == 5);
  CHECK(links.intra.alpha == 5e-5);
  CHECK(links.intra.bandwidth == 1.25e9);
  CHECK(links.inter_alpha == 0.02);
  const gradmesh::topo::LinkMatrix m = gradmesh::app::site_link_matrix(links, 1e-5);
  REQUIRE(m.nodes == 5);
  // Ranks site by site: the ring 0 1 2 3 4 crosses from eu to us at 2 -> 3 and back at 4 -> 0.
  CHECK(m.site == std::vector<std::size_t>{0, 0, 0, 1, 1});
  CHECK(m.site_uplink == std::vector<double>{1.25e8, 6.25e7});
  CHECK(m.alpha[0 * 5 + 1] == 5e-5);
  CHECK(m.bandwidth[0 * 5 + 1] == 1.25e9);
  CHECK(m.alpha[2 * 5 + 3] == 0.02);
  CHECK(m.bandwidth[2 * 5 + 3] == 6.25e7);  // one flow: the slower site's uplink
  CHECK(m.bandwidth[3 * 5 + 4] == 1.25e9);
  CHECK(m.message_seconds == std::vector<double>(5, 1e-5));
  // The ring's one flow per boundary sees the slower uplink; bytes crossing: 2 hops' worth.
  using gradmesh::topo::Traffic;
  CHECK(gradmesh::topo::traffic_link(m, Traffic::kRing).bandwidth == 6.25e7);
  CHECK(gradmesh::topo::inter_site_bytes(m, Traffic::kRing, 100) == 200);
  CHECK_THAT(
      gradmesh::app::describe(links),
      Catch::Contains("2 sites (eu 3 hosts, us 2 hosts (uplink") && Catch::Contains("alpha 20 ms"));
}

TEST_CASE("a bad links file is refused naming its line and key", "[links]") {
  const auto refused = [](const std::string& name, const std::string& text) {
    const auto path = write_text(name, text);
    try {
      (void)read_links_file(path);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    FAIL("no ConfigError for " << name);
    return std::string();
  };
  const std::string two = kTwoSites;
  const auto replaced = [&two](const std::string& from, const std::string& to) {
    std::string text = two;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  CHECK_THAT(refused("rate.toml", replaced("\"1gbit\"", "\"fast\"")),
             Catch::Contains("[inter] bandwidth") && Catch::Contains("line 7"));
  CHECK_THAT(refused("hosts.toml", replaced("hosts = 2", "hosts = 0")),
             Catch::Contains("[[site]] 1 hosts = 0") && Catch::Contains("line 13"));
  CHECK_THAT(refused("alpha.toml", replaced("alpha = 5e-5", "alpha = -1")),
             Catch::Contains("[intra] alpha = -1") && Catch::Contains("line 3"));
  CHECK_THAT(refused("typo.toml", replaced("hosts = 3", "host = 3")),
             Catch::Contains("[[site]] 0 has an unknown key host") && Catch::Contains("line 10"));
  CHECK_THAT(refused("twice.toml", replaced("name = \"us\"", "name = \"eu\"")),
             Catch::Contains("another site has that name"));
  CHECK_THAT(refused("nosite.toml", two.substr(0, two.find("[[site]]"))),
             Catch::Contains("no [[site]] tables"));
  CHECK_THAT(refused("nointer.toml", replaced("[inter]", "[outer]")),
             Catch::Contains("unknown key outer"));
  CHECK_THAT(refused("syntax.toml", "[intra\n"), Catch::Contains("not a links file"));
}

TEST_CASE("every links file in configs/links/ reads", "[links]") {
  std::size_t read = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(GRADMESH_SOURCE_DIR) + "/configs/links")) {
    if (entry.path().extension() != ".toml") continue;
    INFO(entry.path());
    CHECK(read_links_file(entry.path()).nodes() >= 2);
    ++read;
  }
  CHECK(read >= 1);
}
