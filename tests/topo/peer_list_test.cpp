#include "topo/peer_list.h"

#include <filesystem>
#include <fstream>
#include <map>

#include <catch2/catch.hpp>

#include "engine/error.h"

using gradmesh::ConfigError;
using gradmesh::topo::PeerList;
using gradmesh::topo::resolve_rank;

TEST_CASE("peer lists parse HOST:PORT entries in rank order", "[topo][peers]") {
  auto peers = PeerList::parse("127.0.0.1:5000, 127.0.0.1:5001,node-3:6000");
  REQUIRE(peers.size() == 3);
  CHECK(peers[1].address() == "127.0.0.1:5001");
  CHECK(peers[2].host == "node-3");
  CHECK(peers.count_on_host("127.0.0.1") == 2);
  CHECK(PeerList::parse(peers.to_string()).peers() == peers.peers());
}

TEST_CASE("bad peer lists are errors naming the entry", "[topo][peers]") {
  CHECK_THROWS_WITH(PeerList::parse("127.0.0.1:5000,10.0.0.3"), Catch::Contains("entry 1") &&
                                                                    Catch::Contains("'10.0.0.3'") &&
                                                                    Catch::Contains("HOST:PORT"));
  CHECK_THROWS_WITH(PeerList::parse("a:70000"), Catch::Contains("1..65535"));
  CHECK_THROWS_WITH(PeerList::parse("a:1,a:1"), Catch::Contains("twice"));
}

TEST_CASE("peer files skip comments and name the file on errors", "[topo][peers]") {
  const auto path = std::filesystem::temp_directory_path() / "gradmesh_peers_test.txt";
  {
    std::ofstream out(path);
    out << "# the cluster\n127.0.0.1:7000\n\n127.0.0.1:7001  # second\n";
  }
  CHECK(PeerList::from_file(path).size() == 2);
  {
    std::ofstream out(path);
    out << "127.0.0.1:7000\nnot-an-address\n";
  }
  CHECK_THROWS_WITH(PeerList::from_file(path), Catch::Contains(path.string() + ":2"));
  std::filesystem::remove(path);
  CHECK_THROWS_AS(PeerList::from_file(path), ConfigError);
}

TEST_CASE("rank comes from --rank, then the launcher environments", "[topo][rank]") {
  std::map<std::string, std::string> env;
  auto lookup = [&](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  CHECK_THROWS_WITH(resolve_rank(std::nullopt, lookup, 4), Catch::Contains("GRADMESH_RANK"));
  env["RANK"] = "3";
  CHECK(resolve_rank(std::nullopt, lookup, 4).rank == 3);
  env["SLURM_PROCID"] = "1";
  CHECK(resolve_rank(std::nullopt, lookup, 4).source == "SLURM_PROCID");
  env["GRADMESH_RANK"] = "2";
  CHECK(resolve_rank(std::nullopt, lookup, 4).rank == 2);
  CHECK(resolve_rank(0, lookup, 4).source == "--rank");
  CHECK_THROWS_WITH(resolve_rank(4, lookup, 4), Catch::Contains("0..3"));
  env["GRADMESH_RANK"] = "two";
  CHECK_THROWS_WITH(resolve_rank(std::nullopt, lookup, 4), Catch::Contains("GRADMESH_RANK='two'"));
}

TEST_CASE("rank from a given list of variables names only those", "[topo][rank]") {
  const auto lookup = [](std::string_view name) -> std::optional<std::string> {
    if (name == "RANK") return "1";
    return std::nullopt;
  };
  CHECK(resolve_rank(std::nullopt, lookup, 2, {"RANK"}).rank == 1);
  CHECK_THROWS_WITH(resolve_rank(std::nullopt, lookup, 2, {"SLURM_PROCID"}),
                    Catch::Equals("no rank: pass --rank R or set SLURM_PROCID"));
  CHECK_THROWS_WITH(resolve_rank(std::nullopt, lookup, 2, {"A", "B", "C"}),
                    Catch::Equals("no rank: pass --rank R or set A (or B, C)"));
}
