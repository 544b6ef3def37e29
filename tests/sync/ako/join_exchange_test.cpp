// Tests for sync/ako/join_exchange.cpp: the join requests a donor answers and the state a
// rejoining node takes (Ako SoCC'16 sec. 4.3), without a stage or a transport.

#include "sync/ako/join_exchange.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"

using gradmesh::sync::ako::JoinExchange;
using gradmesh::sync::ako::JoinState;
using namespace std::chrono_literals;

namespace {

gradmesh::net::Message state_message(const JoinExchange& exchange, std::span<const float> replica,
                                     std::size_t p1, std::size_t p, double bandwidth) {
  gradmesh::net::Message m;
  m.key = JoinExchange::key(p1, p);
  m.round = 42;
  m.payload = exchange.encode(replica, bandwidth);
  return m;
}

}  // namespace

TEST_CASE("a donor answers the requests queued since its last boundary, in order", "[ako][join]") {
  JoinExchange exchange(4);
  CHECK_FALSE(exchange.requested());
  exchange.request(2);
  exchange.request(3);
  CHECK(exchange.requested());
  CHECK(exchange.take_requests() == std::vector<std::size_t>{2, 3});
  CHECK_FALSE(exchange.requested());
  CHECK(exchange.take_requests().empty());
}

TEST_CASE("a state round-trips: replica, clock, plans and B", "[ako][join]") {
  const std::vector<float> replica = {1.5f, -2.0f, 3.25f};
  JoinExchange donor(3);
  JoinExchange joiner(3);
  REQUIRE(joiner.offer(state_message(donor, replica, 2, 3, 12.5e6)).empty());
  const std::optional<gradmesh::net::Message> m = joiner.await(1s, [] { return false; });
  REQUIRE(m);
  const JoinState s = joiner.decode(*m);
  CHECK(s.clock == 42);
  CHECK(s.p1 == 2);
  CHECK(s.partitions == 3);
  CHECK(s.bandwidth == 12.5e6);
  std::vector<float> out(3);
  REQUIRE(s.replica.size() == 3 * sizeof(float));
  std::memcpy(out.data(), s.replica.data(), s.replica.size());
  CHECK(out == replica);
  // Taken: a second state (a late or forged one) is refused.
  CHECK_THAT(joiner.offer(state_message(donor, replica, 2, 3, 0.0)),
             Catch::Contains("a second replica"));
}

TEST_CASE("a malformed state is refused and the joiner keeps waiting", "[ako][join]") {
  const std::vector<float> replica = {1.0f, 2.0f};
  JoinExchange exchange(2);
  gradmesh::net::Message short_payload = state_message(exchange, replica, 1, 1, 0.0);
  short_payload.payload = gradmesh::net::Payload::allocate(5);
  CHECK_THAT(exchange.offer(std::move(short_payload)),
             Catch::Contains("of 5 bytes") && Catch::Contains("expected 16 bytes"));
  CHECK_FALSE(exchange.offer(state_message(exchange, replica, 0, 1, 0.0)).empty());  // p1 = 0
  CHECK_FALSE(exchange.offer(state_message(exchange, replica, 1, 3, 0.0)).empty());  // p > m
  CHECK_FALSE(exchange.offer(state_message(exchange, replica, 1, 1, -1.0)).empty());
  CHECK_FALSE(exchange.offer(state_message(exchange, replica, 1, 1, NAN)).empty());
  CHECK_FALSE(exchange.await(10ms, [] { return false; }));  // none kept: times out
  CHECK(exchange.offer(state_message(exchange, replica, 1, 2, 0.0)).empty());
  CHECK(exchange.await(10ms, [] { return false; }));
}

TEST_CASE("a joiner waiting on a donor that fails gives up when woken", "[ako][join]") {
  JoinExchange exchange(8);
  std::atomic<bool> donor_dead{false};
  std::thread failure([&] {
    std::this_thread::sleep_for(20ms);
    donor_dead.store(true);
    exchange.wake();
  });
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(exchange.await(60s, [&] { return donor_dead.load(); }));
  failure.join();
  CHECK(std::chrono::steady_clock::now() - start < 30s);  // woken, not timed out
}

TEST_CASE("a state offered from another thread wakes the joiner", "[ako][join]") {
  const std::vector<float> replica(1000, 0.5f);
  JoinExchange exchange(1000);
  std::thread donor(
      [&] { CHECK(exchange.offer(state_message(exchange, replica, 3, 3, 1e9)).empty()); });
  const std::optional<gradmesh::net::Message> m = exchange.await(60s, [] { return false; });
  donor.join();
  REQUIRE(m);
  CHECK(exchange.decode(*m).partitions == 3);
  CHECK_THROWS_AS(exchange.encode(std::vector<float>(3), 0.0), gradmesh::ContractError);
}
