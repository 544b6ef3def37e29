// Tests for sync/channel.h: routing by stage, peer errors as values, rejects counted.

#include "sync/channel.h"

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

TEST_CASE("stage names come from the registry, once each, with stable ids", "[sync][channel]") {
  const auto& names = sync::stage_names();
  REQUIRE(names.size() >= 6);
  for (std::size_t i = 0; i < names.size(); ++i) {
    CHECK(sync::stage_id(names[i]) == i);
    CHECK(std::count(names.begin(), names.end(), names[i]) == 1);
  }
  CHECK_THROWS_AS(sync::stage_id("no_such_stage"), ContractError);
  CHECK(sync::frame_overhead_bytes(sync::stage_id("kv_push"), 1) > 8);
}

TEST_CASE("a channel routes each stage's messages to its handler", "[sync][channel]") {
  auto mesh = net::make_inproc_mesh(3, sync::stage_names());
  sync::Channel receiver(mesh[0].get(), 0, 3);
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
  sync::Channel sender(mesh[1].get(), 1, 3);
  for (auto& t : mesh) t->start();

  REQUIRE_FALSE(sender.send(0, net::Message{push, 1, 5, 0, {}}).has_value());
  REQUIRE_FALSE(sender.send(0, net::Message{sync::stage_id("sf_broadcast"), 3, 0, 0, {}}));
  // A stage nobody on rank 0 routed: rejected and counted, not delivered anywhere.
  REQUIRE_FALSE(sender.send(0, net::Message{sync::stage_id("ako_partition"), 4, 0, 0, {}}));
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

TEST_CASE("a channel without a transport routes but cannot send", "[sync][channel]") {
  sync::Channel alone(nullptr, 0, 1);
  CHECK_FALSE(alone.connected());
  alone.route("kv_push", [](std::size_t, net::Message&&) {});
  CHECK_THROWS_AS((void)alone.send(1, net::Message{}), ContractError);
}

TEST_CASE("a channel gives the transport stage weights by stage name", "[sync][channel]") {
  auto mesh = net::make_inproc_mesh(2, sync::stage_names());
  sync::Channel channel(mesh[0].get(), 0, 2);
  CHECK(mesh[0]->stage_weights().empty());
  channel.set_stage_weights({{"kv_push", 300.0}, {"allreduce", 1200.0}});
  const std::vector<double> weights = mesh[0]->stage_weights();
  REQUIRE(weights.size() == sync::stage_names().size());
  for (std::size_t s = 0; s < weights.size(); ++s) {
    const double expected = s == sync::stage_id("kv_push")     ? 300.0
                            : s == sync::stage_id("allreduce") ? 1200.0
                                                               : 0.0;
    CHECK(weights[s] == expected);
  }
  CHECK_THROWS_AS(channel.set_stage_weights({{"no_such_stage", 1.0}}), ContractError);
  CHECK_THROWS_AS(channel.set_stage_weights({{"kv_push", -1.0}}), ConfigError);
  sync::Channel unconnected(nullptr, 0, 1);
  unconnected.set_stage_weights({{"kv_push", 1.0}});  // no transport: nothing to share
}
