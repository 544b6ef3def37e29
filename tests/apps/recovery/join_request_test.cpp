// Tests for apps/recovery/join_request.h: the files and the list a restarted node's request to
// rejoin a BSP job travels in.

#include "apps/recovery/join_request.h"

#include <unistd.h>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/error.h"
#include "recovery_fixture.h"

using namespace gradmesh;
using namespace gradmesh::app;

using gradmesh::app::testing::TempDir;

TEST_CASE("a join request is filed, read back, replaced by a newer one and withdrawn",
          "[pipeline][rejoin]") {
  TempDir dir("join");
  CHECK(read_join_requests(dir.path).empty());  // no folder yet
  const JoinRequest first = file_join_request(dir.path, "127.0.0.1:9002");
  CHECK(first.nonce != 0);
  CHECK(read_join_requests(dir.path) == std::vector<JoinRequest>{first});
  // Restarted again: the new request replaces the old; withdrawing the old one leaves it.
  const JoinRequest second = file_join_request(dir.path, "127.0.0.1:9002");
  CHECK(second.nonce != first.nonce);
  withdraw_join_request(dir.path, first);
  CHECK(read_join_requests(dir.path) == std::vector<JoinRequest>{second});
  const JoinRequest other = file_join_request(dir.path, "[::1]:9003");
  CHECK(read_join_requests(dir.path).size() == 2);
  withdraw_join_request(dir.path, second);
  CHECK(read_join_requests(dir.path) == std::vector<JoinRequest>{other});
}

TEST_CASE("a malformed or misnamed request file is skipped, not fatal", "[pipeline][rejoin]") {
  TempDir dir("join");
  const JoinRequest good = file_join_request(dir.path, "10.0.0.1:9000");
  std::ofstream(dir.path / "join-requests" / "garbage.json") << "{not json";
  std::ofstream(dir.path / "join-requests" / "10.0.0.2_9000.json")
      << R"({"nonce": 5, "address": "10.0.0.9:9000"})";  // its name says another address
  std::ofstream(dir.path / "join-requests" / "10.0.0.3_9000.json") << R"({"nonce": "x"})";
  std::ofstream(dir.path / "join-requests" / "no-port.json")
      << R"({"nonce": 6, "address": "no-port"})";  // admitted, it would fail the next view
  CHECK(read_join_requests(dir.path) == std::vector<JoinRequest>{good});
}

TEST_CASE("requests travel as a list of numbers, every node merges the lists alike",
          "[pipeline][rejoin]") {
  const std::vector<JoinRequest> a{{7, "127.0.0.1:9002"},
                                   {9, "host-with-a-long-name.example:65535"}};
  CHECK(decode_join_requests(encode_join_requests(a)) == a);
  CHECK(encode_join_requests(std::vector<JoinRequest>{}).empty());
  // Two nodes saw two requests of one address (it was filed again in between): the larger nonce.
  const std::vector<JoinRequest> b{{3, "127.0.0.1:9002"}, {11, "127.0.0.1:9001"}};
  const auto merged = merge_join_requests({encode_join_requests(a), encode_join_requests(b), {}});
  CHECK(merged == std::vector<JoinRequest>{{11, "127.0.0.1:9001"},
                                           {7, "127.0.0.1:9002"},
                                           {9, "host-with-a-long-name.example:65535"}});
  // A list that is not one: a request cut short, an address longer than the list.
  CHECK_THROWS_AS(decode_join_requests(std::vector<std::uint64_t>{7}), ProtocolError);
  CHECK_THROWS_AS(decode_join_requests(std::vector<std::uint64_t>{7, 100, 0}), ProtocolError);
  CHECK_THROWS_AS(decode_join_requests(std::vector<std::uint64_t>{7, 0}), ProtocolError);
}

TEST_CASE("a view's admission is found by the joiner's nonce, a refusal by its own",
          "[pipeline][rejoin]") {
  TempDir dir("join");
  const std::vector<std::string> peers{"127.0.0.1:1", "127.0.0.1:2"};
  CHECK(view_dir(dir.path, 0, peers) == dir.path);
  // CRC-32 of "127.0.0.1:1,127.0.0.1:2" (Python: '%08x' % zlib.crc32(b'...')).
  CHECK(view_id(peers) == "78a8c212");
  CHECK(view_dir(dir.path, 3, peers) == dir.path / "view-3-78a8c212");
  // The halves of a split number their views alike, never their folders.
  CHECK(view_dir(dir.path, 1, {"127.0.0.1:1"}) != view_dir(dir.path, 1, {"127.0.0.1:2"}));
  ViewAdmission a;
  a.view = 2;
  a.peers = {"127.0.0.1:9000", "127.0.0.1:9001", "127.0.0.1:9002"};
  a.resume = view_dir(dir.path, 1, peers);
  a.resume_nodes = 2;
  a.iteration = 450;
  a.admitted = {77};
  write_view_admission(dir.path, a);
  CHECK_FALSE(find_view_admission(dir.path, 78).has_value());
  const auto found = find_view_admission(dir.path, 77);
  REQUIRE(found.has_value());
  CHECK(found->view == 2);
  CHECK(found->peers == a.peers);
  CHECK(found->resume == a.resume);
  CHECK(found->resume_nodes == 2);
  CHECK(found->iteration == 450);

  const JoinRequest mine{77, "127.0.0.1:9002"}, older{76, "127.0.0.1:9002"};
  CHECK_FALSE(find_join_refusal(dir.path, mine).has_value());
  write_join_refusal(dir.path, older, "the job ended");
  CHECK_FALSE(find_join_refusal(dir.path, mine).has_value());  // another request's refusal
  write_join_refusal(dir.path, mine, "the job ended at iteration 900");
  CHECK(find_join_refusal(dir.path, mine) == "the job ended at iteration 900");
  CHECK(read_join_requests(dir.path).empty());  // a refusal is not a request
}
