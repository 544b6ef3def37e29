// Tests for sync/ako/round_sender.h: the network side of Ako's partial gradient exchange (SoCC'16
// sec. 3.1, 4.2), one sender on rank 0 of an in-process mesh, its peers recording what arrives.
// Whatever the rounds, a peer must receive every gradient exactly once: the ranges of the rounds
// (window sums over the link's last p rounds) plus the whole undelivered rest at the end add up to
// the sum of the gradients handed off. Gradients hold small integers, so the sums are exact.

#include "sync/ako/round_sender.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/executor.h"
#include "net/inproc/inproc_transport.h"

using namespace gradmesh;
using namespace gradmesh::sync::ako;

namespace {

constexpr std::size_t kFloats = 11;  // m: not a multiple of the partition counts used

// n ranks on the in-process transport; rank 0 sends, every other rank records the rounds.
struct Mesh {
  std::size_t n;
  std::vector<std::unique_ptr<net::InProcTransport>> transports;
  std::vector<std::unique_ptr<sync::LaneRouter>> routers;
  std::mutex mutex;
  std::vector<std::vector<net::Message>> received;  // by rank, under mutex
  RoundSender::Lanes lanes;

  explicit Mesh(std::size_t nodes)
      : n(nodes), transports(net::make_inproc_mesh(nodes, sync::lane_names())), received(nodes) {
    for (std::size_t r = 0; r < n; ++r) {
      routers.push_back(std::make_unique<sync::LaneRouter>(transports[r].get(), r, n));
      const auto record = [this, r](std::size_t, net::Message&& m) {
        const std::lock_guard lock(mutex);
        received[r].push_back(std::move(m));
      };
      lanes.partition = routers[r]->route(kPartitionLane, record);
      lanes.full_round = routers[r]->route(kFullRoundLane, record);
    }
    for (auto& t : transports) t->start();
  }
  // Delivers everything queued (clean goodbyes, all at once) before the checks read received.
  void shut_down() {
    std::vector<std::thread> leaving;
    for (auto& t : transports) leaving.emplace_back([&t] { t->shutdown(5.0); });
    for (auto& t : leaving) t.join();
  }
};

// Gradient i (1-based): float j holds i + j (integers: every sum below is exact in floats).
std::vector<float> gradient(std::uint64_t i) {
  std::vector<float> g(kFloats);
  for (std::size_t j = 0; j < kFloats; ++j) g[j] = static_cast<float>(i + j);
  return g;
}

std::vector<float> sum_of_gradients(std::uint64_t count) {
  std::vector<float> sum(kFloats, 0.0f);
  for (std::uint64_t i = 1; i <= count; ++i) {
    const auto g = gradient(i);
    for (std::size_t j = 0; j < kFloats; ++j) sum[j] += g[j];
  }
  return sum;
}

// What `messages` add up to: each partition at its range, each full round whole.
std::vector<float> total_of(const std::vector<net::Message>& messages) {
  std::vector<float> total(kFloats, 0.0f);
  for (const net::Message& m : messages) {
    std::vector<float> values(m.payload.size() / sizeof(float));
    std::memcpy(values.data(), m.payload.bytes().data(), m.payload.size());
    std::size_t offset = 0;
    if (m.kind == static_cast<std::uint16_t>(Kind::kPartition)) {
      const std::uint64_t p = m.key >> kPartitionShift;
      const std::uint64_t k = m.key & ((std::uint64_t{1} << kPartitionShift) - 1);
      const Range r = RangePartition(kFloats, p).range(k);
      REQUIRE(values.size() == r.size);
      offset = r.offset;
    } else {
      REQUIRE(m.kind == static_cast<std::uint16_t>(Kind::kFullRound));
      REQUIRE(values.size() == kFloats);
    }
    for (std::size_t j = 0; j < values.size(); ++j) total[offset + j] += values[j];
  }
  return total;
}

// The parts of a sender on rank 0 of `mesh`, over a configured p (or automatic p, left in
// warm-up: nothing agreed).
struct Sender {
  engine::Executor executor{engine::ExecutorOptions{1, 1}};
  PartitionAgreement agreement;
  Membership membership;
  HandoffRing ring{kFloats, 4};
  std::vector<PeerError> failures;
  RoundSender sender;

  Sender(Mesh& mesh, std::optional<std::size_t> partitions)
      : agreement(0, mesh.n, kFloats, !partitions.has_value(), 0.0, {}),
        membership(0, mesh.n, std::nullopt),
        sender(0, mesh.n, kFloats, mesh.lanes, 4, executor, *mesh.routers[0], agreement, membership,
               ring, [this](const PeerError& e) { failures.push_back(e); }, {}) {
    if (partitions) {
      (void)agreement.agree(0, *partitions, static_cast<double>(*partitions),
                            [](std::size_t) { return true; });
    }
  }

  // Whatever a check left running stops before the parts it uses go.
  ~Sender() {
    sender.stop(false);
    executor.wait_idle();
  }

  // Hands off gradients first..last, each posted; waits for each one's round.
  void hand_off(std::uint64_t first, std::uint64_t last) {
    for (std::uint64_t i = first; i <= last; ++i) {
      ring.put(gradient(i));
      sender.post();
      // One round per gradient where the network keeps up: wait for this one's round.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (sender.sent_clock() < i && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      REQUIRE(sender.sent_clock() == i);
    }
  }
};

}  // namespace

TEST_CASE(
    "Ako rounds deliver every gradient to every peer exactly once, over p rounds and the rest",
    "[sync][ako][inproc]") {
  for (const std::size_t p : {std::size_t{1}, std::size_t{3}, std::size_t{4}}) {
    INFO("p " << p);
    Mesh mesh(3);
    Sender s(mesh, p);
    s.hand_off(1, 7);
    s.sender.stop(true);  // the end: each peer gets, whole, what it lacks
    s.executor.wait_idle();
    mesh.shut_down();
    CHECK(s.failures.empty());
    CHECK(s.sender.rounds_sent() == 8);  // 7 rounds and the undelivered rest
    CHECK(s.sender.full_rounds() == 1);
    for (std::size_t r = 1; r < 3; ++r) {
      INFO("rank " << r);
      const auto& got = mesh.received[r];
      REQUIRE(got.size() == 8);
      for (std::size_t i = 0; i < 7; ++i) {
        CHECK(got[i].kind == static_cast<std::uint16_t>(Kind::kPartition));
        CHECK(got[i].key >> kPartitionShift == p);
        CHECK(got[i].round == i + 1);  // a round is tagged with its last gradient's clock
      }
      CHECK(total_of(got) == sum_of_gradients(7));
    }
    CHECK(mesh.received[0].empty());
  }
}

TEST_CASE("Ako warm-up rounds send the whole accumulated gradient, and nothing is owed after them",
          "[sync][ako][inproc]") {
  Mesh mesh(2);
  Sender s(mesh, std::nullopt);  // automatic p, no plan agreed: warm-up
  s.hand_off(1, 5);
  s.sender.stop(true);  // warm-up rounds delivered whole: nothing more to send
  s.executor.wait_idle();
  mesh.shut_down();
  CHECK(s.sender.rounds_sent() == 5);
  CHECK(s.sender.full_rounds() == 5);
  const auto& got = mesh.received[1];
  REQUIRE(got.size() == 5);
  for (const net::Message& m : got) CHECK(m.kind == static_cast<std::uint16_t>(Kind::kFullRound));
  CHECK(total_of(got) == sum_of_gradients(5));
}

TEST_CASE("A peer dropped from the membership gets no more rounds, the others all of theirs",
          "[sync][ako][inproc]") {
  Mesh mesh(3);
  Sender s(mesh, std::size_t{2});
  s.hand_off(1, 2);
  REQUIRE(s.membership.drop(2).has_value());
  s.hand_off(3, 6);
  s.sender.stop(true);
  s.executor.wait_idle();
  mesh.shut_down();
  CHECK(mesh.received[2].size() == 2);  // the two rounds before the drop
  REQUIRE(mesh.received[1].size() == 7);
  CHECK(total_of(mesh.received[1]) == sum_of_gradients(6));
  // After stop() nothing is sent: a later post() does nothing.
  s.sender.post();
  CHECK(s.sender.rounds_sent() == 7);
}
