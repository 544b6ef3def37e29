#include "topo/hostlist.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"

using gradmesh::ConfigError;
using gradmesh::topo::expand_hostlist;
using Names = std::vector<std::string>;

namespace {
Names expand(const char* list) { return expand_hostlist(list, "SLURM_JOB_NODELIST"); }
}  // namespace

TEST_CASE("SLURM host lists expand ranges and single numbers in order", "[topo][hostlist]") {
  CHECK(expand("node[01-03,07]") == Names{"node01", "node02", "node03", "node07"});
  CHECK(expand("node1") == Names{"node1"});
  CHECK(expand("a1,b[1-2]") == Names{"a1", "b1", "b2"});
  CHECK(expand("gpu[1-2],cpu[5],login") == Names{"gpu1", "gpu2", "cpu5", "login"});
  CHECK(expand("n[7]") == Names{"n7"});
}

TEST_CASE("SLURM host lists keep the zero padding of each range", "[topo][hostlist]") {
  CHECK(expand("n[008-010]") == Names{"n008", "n009", "n010"});
  CHECK(expand("n[98-100]") == Names{"n98", "n99", "n100"});
  CHECK(expand("n[0-1,003]") == Names{"n0", "n1", "n003"});
}

TEST_CASE("SLURM host lists expand suffixes and several groups as a product", "[topo][hostlist]") {
  CHECK(expand("node[1-2]-ib") == Names{"node1-ib", "node2-ib"});
  CHECK(expand("r[1-2]n[01-02]") == Names{"r1n01", "r1n02", "r2n01", "r2n02"});
  CHECK(expand("host-1.example.org") == Names{"host-1.example.org"});
}

TEST_CASE("bad SLURM host lists are errors naming the variable, list and position",
          "[topo][hostlist]") {
  const auto error = [](const char* list) {
    try {
      (void)expand(list);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error("node[01-03"), Catch::StartsWith("SLURM_JOB_NODELIST='node[01-03': '[' never "
                                                    "closed at position 4") &&
                                      Catch::Contains("NAME[RANGES]"));
  CHECK_THAT(error("node01-03]"), Catch::Contains("']' without a '['"));
  CHECK_THAT(error("n[1-[2]]"), Catch::Contains("'[' inside a bracket group"));
  CHECK_THAT(error("node[]"), Catch::Contains("empty bracket group"));
  CHECK_THAT(error("node[3-1]"), Catch::Contains("range '3-1' ends below its start"));
  CHECK_THAT(error("node[a-b]"), Catch::Contains("'a' is not a number"));
  CHECK_THAT(error("node[1-]"), Catch::Contains("a range bound is missing"));
  CHECK_THAT(error("node[1,]"), Catch::Contains("a range bound is missing"));
  CHECK_THAT(error("node[1-2-3]"), Catch::Contains("'2-3' is not a number"));
  CHECK_THAT(error("node[+1]"), Catch::Contains("'+1' is not a number"));
  CHECK_THAT(error("a,,b"), Catch::Contains("empty entry at position 2"));
  CHECK_THAT(error("a,"), Catch::Contains("empty entry after the last ','"));
  CHECK_THAT(error(",a"), Catch::Contains("empty entry at position 0"));
  CHECK_THAT(error(""), Catch::Contains("the list is empty"));
  CHECK_THAT(error("a b"), Catch::Contains("white space at position 1"));
  CHECK_THAT(error("n[0-99999999]"), Catch::Contains("more than 65536"));
  CHECK_THAT(error("n[0-999]m[0-999]"), Catch::Contains("more than 65536 hosts"));
  CHECK_THAT(error("n[99999999999999999999999]"), Catch::Contains("is not a number"));
}
