// Tests for sync/lane_router.h: routing by lane, peer errors as values, rejects counted.

#include "sync/lane_router.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "net/inproc/inproc_transport.h"

using namespace gradmesh;
using namespace std::chrono_literals;

namespace {
template <class Predicate>
bool eventually(Predicate predicate) {
  for (int i = 0; i < 500; ++i) {
    if (predicate()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return predicate();
}
}  // namespace

TEST_CASE("lane names come from the registry, once each, with stable ids", "[sync][router]") {
  const auto& names = sync::lane_names();
  REQUIRE(names.size() >= 6);
  for (std::size_t i = 0; i < names.size(); ++i) {
    CHECK(sync::lane_id(names[i]) == i);
    CHECK(std::count(names.begin(), names.end(), names[i]) == 1);
  }
  CHECK_THROWS_AS(sync::lane_id("no_such_lane"), ContractError);
  CHECK(sync::frame_overhead_bytes(sync::lane_id("kv_push"), 1) > 8);
}

TEST_CASE("a router routes each lane's messages to its handler", "[sync][router]") {
  auto mesh = net::make_inproc_mesh(3, sync::lane_names());
  sync::LaneRouter receiver(mesh[0].get(), 0, 3);
  std::atomic<int> pushes{0}, factors{0}, failures{0};
  const auto push = receiver.route("kv_push", [&](std::size_t from, net::Message&& m) {
    CHECK(from == 1);
    CHECK(m.key == 5);
    ++pushes;
  });
  receiver.route("sf_broadcast", [&](std::size_t, net::Message&&) { ++factors; });
  receiver.on_failure([&](const PeerError& e) {
    CHECK(e.rank() == 2);
    ++failures;
  });
  CHECK_THROWS_AS(receiver.route("kv_push", [](std::size_t, net::Message&&) {}), ContractError);
  sync::LaneRouter sender(mesh[1].get(), 1, 3);
  for (auto& t : mesh) t->start();

  REQUIRE_FALSE(sender.send(0, net::Message{push, 1, 5, 0, {}}).has_value());
  REQUIRE_FALSE(sender.send(0, net::Message{sync::lane_id("sf_broadcast"), 3, 0, 0, {}}));
  // A lane nobody on rank 0 routed: rejected and counted, not delivered anywhere.
  REQUIRE_FALSE(sender.send(0, net::Message{sync::lane_id("ako_partition"), 4, 0, 0, {}}));
  REQUIRE(eventually([&] { return pushes == 1 && factors == 1 && receiver.rejected() == 1; }));

  mesh[2]->close();
  REQUIRE(eventually([&] { return failures == 1; }));
  const auto errors = sender.broadcast(net::Message{push, 1, 5, 0, {}});
  REQUIRE(errors.size() == 1);  // rank 2 is a value, rank 0 got its copy
  CHECK(errors[0].rank() == 2);
  CHECK_THROWS_AS(sync::throw_first(errors), PeerError);
  REQUIRE(eventually([&] { return pushes == 2; }));
  for (auto& t : mesh) t->shutdown(1.0);
}

TEST_CASE("a router without a transport routes but cannot send", "[sync][router]") {
  sync::LaneRouter alone(nullptr, 0, 1);
  CHECK_FALSE(alone.connected());
  alone.route("kv_push", [](std::size_t, net::Message&&) {});
  CHECK_THROWS_AS((void)alone.send(1, net::Message{}), ContractError);
}

TEST_CASE("a router gives the transport lane weights by lane name", "[sync][router]") {
  auto mesh = net::make_inproc_mesh(2, sync::lane_names());
  sync::LaneRouter router(mesh[0].get(), 0, 2);
  CHECK(mesh[0]->lane_weights().empty());
  router.set_lane_weights({{"kv_push", 300.0}, {"allreduce", 1200.0}});
  const std::vector<double> weights = mesh[0]->lane_weights();
  REQUIRE(weights.size() == sync::lane_names().size());
  for (std::size_t s = 0; s < weights.size(); ++s) {
    const double expected = s == sync::lane_id("kv_push")     ? 300.0
                            : s == sync::lane_id("allreduce") ? 1200.0
                                                              : 0.0;
    CHECK(weights[s] == expected);
  }
  CHECK_THROWS_AS(router.set_lane_weights({{"no_such_lane", 1.0}}), ContractError);
  CHECK_THROWS_AS(router.set_lane_weights({{"kv_push", -1.0}}), ConfigError);
  sync::LaneRouter unconnected(nullptr, 0, 1);
  unconnected.set_lane_weights({{"kv_push", 1.0}});  // no transport: nothing to share
}
