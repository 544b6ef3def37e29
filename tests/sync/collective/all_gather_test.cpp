// Tests for sync/collective/all_gather.h: ranks as threads on the in-process transport.

#include "sync/collective/all_gather.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "engine/executor.h"
#include "engine/graph.h"
#include "net/inproc/inproc_transport.h"

using namespace gradmesh;
using sync::collective::AllGather;
using sync::collective::Barrier;

namespace {

// The lane and kind the tests gather on (any routed lane will do; its owner hands the gather
// its messages).
const sync::LaneId kLane = sync::lane_id("resume");
constexpr std::uint16_t kKind = 3;

// n ranks, each with its router and gather routed on kLane, transports started; closed at the
// end.
struct Ranks {
  std::vector<std::unique_ptr<net::InProcTransport>> mesh;
  std::vector<std::unique_ptr<sync::LaneRouter>> routers;
  std::vector<std::unique_ptr<AllGather>> gathers;

  explicit Ranks(std::size_t n, std::size_t max_payload = SIZE_MAX)
      : mesh(net::make_inproc_mesh(n, sync::lane_names())) {
    for (std::size_t r = 0; r < n; ++r) {
      routers.push_back(std::make_unique<sync::LaneRouter>(mesh[r].get(), r, n));
      gathers.push_back(std::make_unique<AllGather>(*routers[r], kLane, kKind, max_payload));
      (void)routers[r]->route("resume", [g = gathers[r].get()](std::size_t from, net::Message&& m) {
        g->on_message(from, std::move(m));
      });
    }
    for (auto& t : mesh) t->start();
  }
  ~Ranks() {
    std::vector<std::thread> leaving;  // clean goodbyes, all at once (each waits for the others)
    for (auto& t : mesh) leaving.emplace_back([&t] { t->shutdown(5.0); });
    for (auto& t : leaving) t.join();
  }
};

// Rank r's payload in round t: r * 3 + t % 2 bytes (rank 0's first is empty), each byte known.
net::Payload payload_of(std::size_t rank, std::uint64_t round) {
  std::vector<std::byte> bytes(rank * 3 + round % 2);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<std::byte>(rank * 31 + round * 7 + i);
  }
  return net::Payload::copy_of(bytes);
}

bool same(const net::Payload& a, const net::Payload& b) {
  return a.size() == b.size() &&
         (a.size() == 0 || std::memcmp(a.bytes().data(), b.bytes().data(), a.size()) == 0);
}

std::string never(std::size_t) { return "never silent"; }

}  // namespace

TEST_CASE("all-gather gives every rank every payload, n = 1..5, blocking and without a thread",
          "[sync][collective][inproc]") {
  for (std::size_t n = 1; n <= 5; ++n) {
    INFO("n " << n);
    Ranks ranks(n);
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(n);
    std::vector<std::vector<std::vector<net::Payload>>> got(n);  // by rank, by round
    for (std::size_t r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          AllGather& gather = *ranks.gathers[r];
          // Rounds 0, 2, 4: blocking. Rounds 5, 7: deferred tasks (ranks run ahead of each other,
          // so payloads of a later round arrive before this rank's start()).
          for (const std::uint64_t round : {0, 2, 4}) {
            gather.start(round, payload_of(r, round));
            got[r].push_back(gather.wait(round, 20.0, never));
          }
          engine::Executor executor({1, 1});
          engine::Graph graph;
          std::uint64_t round = 5;
          auto start = graph.emplace("start", engine::Arena::kNetwork, [&](engine::TaskContext&) {
            gather.start(round, payload_of(r, round));
          });
          auto wait = graph.emplace("wait", engine::Arena::kNetwork, [&](engine::TaskContext& t) {
            gather.await(round, t.defer());
          });
          auto take = graph.emplace("take", engine::Arena::kCompute, [&](engine::TaskContext&) {
            got[r].push_back(gather.take(round));
          });
          start.precede(wait);
          wait.precede(take);
          executor.run(graph);
          round = 7;
          executor.run(graph);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
    const std::vector<std::uint64_t> rounds{0, 2, 4, 5, 7};
    for (std::size_t r = 0; r < n; ++r) {
      REQUIRE(got[r].size() == rounds.size());
      CHECK(ranks.routers[r]->rejected() == 0);
      for (std::size_t i = 0; i < rounds.size(); ++i) {
        REQUIRE(got[r][i].size() == n);
        for (std::size_t q = 0; q < n; ++q) {
          INFO("rank " << r << ", round " << rounds[i] << ", payload of rank " << q);
          CHECK(same(got[r][i][q], payload_of(q, rounds[i])));
        }
      }
    }
  }
}

TEST_CASE("all-gather rejects what breaks its protocol and keeps memory bounded",
          "[sync][collective][inproc]") {
  Ranks ranks(2, 16);
  AllGather& gather = *ranks.gathers[0];
  auto& peer = *ranks.mesh[1];
  const auto rejected_within = [&](std::uint64_t count) {
    for (int i = 0; i < 500 && ranks.routers[0]->rejected() < count; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return ranks.routers[0]->rejected();
  };
  peer.send(0, net::Message{kLane, kKind, 0, 1, payload_of(1, 1), 0});  // early: kept
  gather.start(1, payload_of(0, 1));
  const auto both = gather.wait(1, 20.0, never);
  CHECK(same(both[1], payload_of(1, 1)));
  peer.send(0, net::Message{kLane, kKind, 0, 1, payload_of(1, 1), 0});  // round 1 is over
  CHECK(rejected_within(1) == 1);
  peer.send(0, net::Message{kLane, kKind, 0, 2, payload_of(1, 2), 0});
  peer.send(0, net::Message{kLane, kKind, 0, 2, payload_of(1, 2), 0});  // a second payload
  CHECK(rejected_within(2) == 2);
  peer.send(0, net::Message{kLane, kKind, 5, 3, payload_of(1, 3), 0});  // key not 0
  CHECK(rejected_within(3) == 3);
  peer.send(0, net::Message{kLane, kKind, 0, 3, net::Payload::allocate(17), 0});  // too large
  CHECK(rejected_within(4) == 4);
  // Rounds 2 (above), 3, 4, 5 wait: a fifth round to come is a misbehaving peer's.
  for (std::uint64_t round = 3; round <= 6; ++round) {
    peer.send(0, net::Message{kLane, kKind, 0, round, payload_of(1, round), 0});
  }
  CHECK(rejected_within(5) == 5);
  CHECK(gather.rejected() == 5);
  CHECK_THROWS_AS(gather.start(1, payload_of(0, 1)), ContractError);  // rounds increase
}

TEST_CASE("a silent peer is named after the timeout, a failed one at once",
          "[sync][collective][inproc]") {
  Ranks ranks(3);
  AllGather& gather = *ranks.gathers[0];
  ranks.mesh[2]->send(0, net::Message{kLane, kKind, 0, 0, payload_of(2, 0), 0});
  gather.start(0, payload_of(0, 0));
  CHECK_THROWS_WITH(gather.wait(0, 0.2,
                                [](std::size_t rank) {
                                  return "rank " + std::to_string(rank) + " sent nothing";
                                }),
                    Catch::Contains("rank 1 sent nothing"));
  gather.start(1, payload_of(0, 1));
  gather.fail(PeerError(1, "rank 1", "went away"));
  gather.fail(PeerError(2, "rank 2", "went away too"));  // first error wins
  engine::Executor executor({1, 1});
  engine::Graph graph;
  graph.emplace("wait", engine::Arena::kNetwork,
                [&](engine::TaskContext& t) { gather.await(1, t.defer()); });
  CHECK_THROWS_WITH(executor.run(graph), Catch::Contains("went away") && !Catch::Contains("too"));
  CHECK_THROWS_WITH(gather.start(2, payload_of(0, 2)),
                    Catch::Contains("went away") && !Catch::Contains("too"));
}

TEST_CASE("a barrier returns when every rank reached its round", "[sync][collective][inproc]") {
  for (std::size_t n = 1; n <= 4; ++n) {
    auto mesh = net::make_inproc_mesh(n, sync::lane_names());
    std::vector<std::unique_ptr<sync::LaneRouter>> routers;
    std::vector<std::unique_ptr<Barrier>> barriers;
    for (std::size_t r = 0; r < n; ++r) {
      routers.push_back(std::make_unique<sync::LaneRouter>(mesh[r].get(), r, n));
      barriers.push_back(std::make_unique<Barrier>(*routers[r], kLane, kKind));
      (void)routers[r]->route("resume",
                              [b = barriers[r].get()](std::size_t from, net::Message&& m) {
                                b->on_message(from, std::move(m));
                              });
    }
    for (auto& t : mesh) t->start();
    std::atomic<std::size_t> arrived{0};
    std::vector<std::size_t> seen(n);
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20 * r));  // the last is late
        ++arrived;
        barriers[r]->arrive_and_wait(4, 20.0, never);
        seen[r] = arrived.load();  // every rank arrived before any left
      });
    }
    for (auto& t : threads) t.join();
    for (std::size_t r = 0; r < n; ++r) CHECK(seen[r] == n);
    // A barrier carries nothing: a payload is rejected.
    if (n > 1) {
      mesh[1]->send(0, net::Message{kLane, kKind, 0, 5, payload_of(1, 1), 0});
      for (int i = 0; i < 500 && routers[0]->rejected() == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      CHECK(routers[0]->rejected() == 1);
    }
    std::vector<std::thread> leaving;
    for (auto& t : mesh) leaving.emplace_back([&t] { t->shutdown(5.0); });
    for (auto& t : leaving) t.join();
  }
}
