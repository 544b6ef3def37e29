// Tests for sync/ako/final_exchange.cpp: the end-of-job markers and the survivors' mean of the
// replicas, without a stage or a transport.

#include "sync/ako/final_exchange.h"

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"

using gradmesh::net::Payload;
using gradmesh::sync::ako::FinalExchange;
using namespace std::chrono_literals;

namespace {

Payload replica_of(const std::vector<float>& values) {
  return Payload::copy_of(std::as_bytes(std::span<const float>(values)));
}

FinalExchange::Clock::time_point in(std::chrono::milliseconds ms) {
  return FinalExchange::Clock::now() + ms;
}

const FinalExchange::Live kAllLive = [](std::size_t) { return true; };

}  // namespace

TEST_CASE("finish waits for every live peer's marker, and a failed peer is not waited for",
          "[ako][final]") {
  FinalExchange end(0, 4, 2);
  CHECK(end.pending(kAllLive) == 3);
  CHECK(end.done(1).empty());
  CHECK_THAT(end.done(1), Catch::Contains("a second end-of-job marker"));
  CHECK(end.done(2).empty());
  CHECK_FALSE(end.await_done(in(10ms), kAllLive));  // rank 3's is missing
  const FinalExchange::Live rank3_dead = [](std::size_t r) { return r != 3; };
  CHECK(end.pending(rank3_dead) == 0);
  CHECK(end.await_done(in(10ms), rank3_dead));
  end.reset(2);  // rank 2 rejoined: its marker is due again
  CHECK(end.pending(rank3_dead) == 1);
}

TEST_CASE("a marker from another thread ends the wait", "[ako][final]") {
  FinalExchange end(1, 2, 1);
  std::thread peer([&] {
    std::this_thread::sleep_for(10ms);
    CHECK(end.done(0).empty());
  });
  CHECK(end.await_done(in(60'000ms), kAllLive));
  peer.join();
}

TEST_CASE("the survivors' mean sums the replicas that arrived in rank order", "[ako][final]") {
  FinalExchange end(1, 4, 3);
  CHECK(end.replica(0, replica_of({1.0f, 2.0f, 3.0f})).empty());
  CHECK(end.replica(3, replica_of({3.0f, 4.0f, 5.0f})).empty());
  CHECK_THAT(end.replica(3, replica_of({0.0f, 0.0f, 0.0f})), Catch::Contains("a second replica"));
  CHECK_THAT(end.replica(2, replica_of({1.0f})),
             Catch::Contains("a replica of 4 bytes") && Catch::Contains("expected 12"));
  std::vector<float> mine = {2.0f, 3.0f, 4.0f};
  // Rank 2 failed: the mean of ranks 0, 1 (this node) and 3.
  const std::size_t count =
      end.average_survivors(mine, in(10'000ms), [](std::size_t r) { return r != 2; });
  CHECK(count == 3);
  CHECK(mine == std::vector<float>{2.0f, 3.0f, 4.0f});
  // Bitwise the sum a survivor computes the same way: ((r0 + r1) + r3) / 3 in floats.
  std::vector<float> odd = {0.1f, 0.2f, 0.3f};
  FinalExchange other(0, 2, 3);
  CHECK(other.replica(1, replica_of({0.7f, 0.11f, 1e-8f})).empty());
  CHECK(other.average_survivors(odd, in(10'000ms), kAllLive) == 2);
  CHECK(odd[0] == (0.1f + 0.7f) * 0.5f);
  CHECK(odd[2] == (0.3f + 1e-8f) * 0.5f);
}

TEST_CASE("with no replica by the deadline a node keeps its own", "[ako][final]") {
  FinalExchange end(0, 3, 2);
  std::vector<float> mine = {5.0f, -1.0f};
  CHECK(end.average_survivors(mine, in(10ms), kAllLive) == 1);
  CHECK(mine == std::vector<float>{5.0f, -1.0f});
  std::vector<float> wrong(3);
  CHECK_THROWS_AS(end.average_survivors(wrong, in(1ms), kAllLive), gradmesh::ContractError);
}
