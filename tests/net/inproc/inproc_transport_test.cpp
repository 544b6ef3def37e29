// Tests for net/inproc/inproc_transport.h: the in-process backend keeps net::Transport's contract.

#include "net/inproc/inproc_transport.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "net/frame.h"

using namespace gradmesh::net;
using namespace std::chrono_literals;
using gradmesh::PeerError;

namespace {

// What one rank's handlers saw.
struct Seen {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::pair<std::size_t, Message>> messages;
  std::vector<PeerError> failures;
  std::vector<std::thread::id> threads;

  void attach(Transport& transport) {
    transport.set_handlers(
        [this](std::size_t from, Message&& message) {
          const std::lock_guard lock(mutex);
          messages.emplace_back(from, std::move(message));
          threads.push_back(std::this_thread::get_id());
          changed.notify_all();
        },
        [this](const PeerError& error) {
          const std::lock_guard lock(mutex);
          failures.push_back(error);
          changed.notify_all();
        });
  }
  template <class Predicate>
  bool wait(Predicate predicate) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 10s, [&] { return predicate(*this); });
  }
};

// Clean goodbyes, all at once: each shutdown() waits for the other ranks' (as on TCP).
void shutdown_all(std::vector<std::unique_ptr<InProcTransport>>& mesh) {
  std::vector<std::thread> leaving;
  for (auto& t : mesh) leaving.emplace_back([&t] { t->shutdown(5.0); });
  for (auto& t : leaving) t.join();
}

Payload floats(std::vector<float> values) {
  return Payload::copy_of(std::as_bytes(std::span<const float>(values)));
}

}  // namespace

TEST_CASE("inproc: every message arrives once, in send order per peer, on the delivery thread") {
  constexpr std::size_t kRanks = 3;
  constexpr std::uint64_t kPerSender = 500;
  auto mesh = make_inproc_mesh(kRanks, {"a", "b"});
  std::vector<Seen> seen(kRanks);
  for (std::size_t r = 0; r < kRanks; ++r) seen[r].attach(*mesh[r]);
  for (auto& t : mesh) t->start();

  std::vector<std::thread> senders;
  for (std::size_t from = 1; from < kRanks; ++from) {
    senders.emplace_back([&, from] {
      for (std::uint64_t i = 0; i < kPerSender; ++i) {
        mesh[from]->send(0, Message{static_cast<std::uint8_t>(i % 2), 7, from, i,
                                    floats({static_cast<float>(i)})});
      }
    });
  }
  for (auto& s : senders) s.join();
  REQUIRE(seen[0].wait([&](Seen& s) { return s.messages.size() == (kRanks - 1) * kPerSender; }));

  std::vector<std::uint64_t> next(kRanks, 0);
  for (const auto& [from, message] : seen[0].messages) {
    REQUIRE(message.key == from);
    REQUIRE(message.round == next[from]);  // FIFO per peer, none lost or repeated
    REQUIRE(message.payload.owned());
    REQUIRE(message.payload.as<float>()[0] == static_cast<float>(next[from]));
    ++next[from];
  }
  for (const auto id : seen[0].threads) {
    CHECK(id == seen[0].threads.front());  // one delivery thread
    CHECK(id != std::this_thread::get_id());
  }
  shutdown_all(mesh);
}

TEST_CASE("inproc: counters count the wire bytes TCP would, by peer and lane") {
  auto mesh = make_inproc_mesh(2, {"push", "pull"});
  Seen seen;
  seen.attach(*mesh[1]);
  for (auto& t : mesh) t->start();
  const Message message{1, 3, 42, 9, floats({1, 2, 3, 4})};
  const std::size_t wire = encode_data(message)->wire_bytes();
  REQUIRE(wire > 16);
  mesh[0]->send(1, message);
  REQUIRE(seen.wait([](Seen& s) { return s.messages.size() == 1; }));
  const Counters sent = mesh[0]->counters();
  CHECK(sent.bytes_sent == wire);
  CHECK(sent.bytes_sent_by_peer[1] == wire);
  CHECK(sent.bytes_sent_by_lane.at("pull") == wire);
  CHECK(sent.bytes_sent_by_lane.at("push") == 0);
  CHECK(sent.bytes_sent_by_lane.count("control") == 1);
  const Counters received = mesh[1]->counters();
  CHECK(received.bytes_received == wire);
  CHECK(received.bytes_received_by_lane.at("pull") == wire);
  shutdown_all(mesh);
}

TEST_CASE("inproc: delivery releases the sender's payload, as a socket write does") {
  auto mesh = make_inproc_mesh(2, {"s"});
  Seen seen;
  seen.attach(*mesh[1]);
  for (auto& t : mesh) t->start();
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{5, 6});
  std::weak_ptr<std::vector<float>> weak = owner;
  mesh[0]->send(
      1, Message{0, 1, 0, 0, Payload::view(std::as_bytes(std::span<const float>(*owner)), owner)});
  owner.reset();
  REQUIRE(seen.wait([](Seen& s) { return s.messages.size() == 1; }));
  CHECK(weak.expired());
  CHECK(seen.messages[0].second.payload.as<float>()[1] == 6.0f);
  shutdown_all(mesh);
}

TEST_CASE("inproc: a closed rank is a PeerError everywhere, a clean shutdown fails no one") {
  auto mesh = make_inproc_mesh(3, {"s"});
  std::vector<Seen> seen(3);
  for (std::size_t r = 0; r < 3; ++r) seen[r].attach(*mesh[r]);
  for (auto& t : mesh) t->start();

  mesh[2]->abort("disk full");
  for (std::size_t r = 0; r < 2; ++r) {
    REQUIRE(seen[r].wait([](Seen& s) { return s.failures.size() == 1; }));
    CHECK(seen[r].failures[0].rank() == 2);
    CHECK_THAT(seen[r].failures[0].what(), Catch::Contains("aborted the job: disk full"));
  }
  CHECK_THROWS_AS(mesh[0]->send(2, Message{}), PeerError);
  CHECK_THROWS_AS(mesh[2]->send(0, Message{}), gradmesh::Error);

  std::thread other([&] { mesh[1]->shutdown(5.0); });
  mesh[0]->shutdown(5.0);
  other.join();
  CHECK(seen[0].failures.size() == 1);  // the shutdowns added none
  CHECK(seen[1].failures.size() == 1);
}

TEST_CASE(
    "inproc: a cut link fails the pair both ways and nothing else, and shutdown waits not for it") {
  auto mesh = make_inproc_mesh(3, {"s"});
  std::vector<Seen> seen(3);
  for (std::size_t r = 0; r < 3; ++r) seen[r].attach(*mesh[r]);
  for (auto& t : mesh) t->start();

  mesh[0]->cut_link(1);
  mesh[1]->cut_link(0);  // idempotent from either side
  for (const auto& [r, other] : {std::pair{0, 1}, std::pair{1, 0}}) {
    REQUIRE(seen[r].wait([](Seen& s) { return s.failures.size() == 1; }));
    CHECK(seen[r].failures[0].rank() == static_cast<std::size_t>(other));
    CHECK_THAT(seen[r].failures[0].what(), Catch::Contains("link cut"));
  }
  CHECK_THROWS_AS(mesh[0]->send(1, Message{}), PeerError);
  CHECK_THROWS_AS(mesh[1]->send(0, Message{}), PeerError);
  // Rank 2 still reaches both, and both reach it.
  mesh[0]->send(2, Message{});
  mesh[1]->send(2, Message{});
  mesh[2]->send(0, Message{});
  REQUIRE(seen[2].wait([](Seen& s) { return s.messages.size() == 2; }));
  REQUIRE(seen[0].wait([](Seen& s) { return s.messages.size() == 1; }));
  CHECK(seen[2].failures.empty());

  const auto start = std::chrono::steady_clock::now();
  std::thread a([&] { mesh[1]->shutdown(5.0); });
  std::thread b([&] { mesh[2]->shutdown(5.0); });
  mesh[0]->shutdown(5.0);  // waits for rank 2, not for rank 1 across the cut
  a.join();
  b.join();
  CHECK(std::chrono::steady_clock::now() - start < 4s);
  CHECK(seen[0].failures.size() == 1);
  CHECK(seen[1].failures.size() == 1);
  CHECK(seen[2].failures.empty());
}

TEST_CASE("inproc: bad sends are contract errors") {
  auto mesh = make_inproc_mesh(2, {"s"});
  CHECK_THROWS_AS(mesh[0]->send(1, Message{}), gradmesh::Error);  // before start()
  mesh[0]->start();
  CHECK_THROWS_AS(mesh[0]->send(0, Message{}), gradmesh::ContractError);
  CHECK_THROWS_AS(mesh[0]->send(5, Message{}), gradmesh::ContractError);
  CHECK_THROWS_AS(mesh[0]->send(1, Message{3, 0, 0, 0, {}}), gradmesh::ContractError);
  CHECK_THROWS_AS(mesh[0]->start(), gradmesh::Error);
  CHECK(mesh[0]->size() == 2);
  CHECK(mesh[1]->rank() == 1);
}

TEST_CASE("inproc: a slow link delivers at its rate, in order, and holds up no other sender") {
  auto mesh = make_inproc_mesh(3, {"a"});
  std::vector<Seen> seen(3);
  for (std::size_t r = 0; r < 3; ++r) seen[r].attach(*mesh[r]);
  for (auto& t : mesh) t->start();
  constexpr double kRate = 1e6;  // bytes/s: the first message takes 1 s, the 4 others 40 ms each
  mesh[1]->set_link_rate(0, kRate);
  const std::vector<std::byte> large(1000000);
  const std::vector<std::byte> small(10000);
  const auto wire = [](const std::vector<std::byte>& bytes) {
    return static_cast<double>(
        encode_data(Message{0, 1, 0, 0, Payload::copy_of(bytes)})->wire_bytes());
  };
  const auto start = std::chrono::steady_clock::now();
  mesh[1]->send(0, Message{0, 1, 1, 0, Payload::copy_of(large)});
  mesh[2]->send(0, Message{0, 1, 2, 0, Payload{}});  // an instant link: not behind rank 1's
  for (std::uint64_t i = 1; i < 5; ++i)
    mesh[1]->send(0, Message{0, 1, 1, i, Payload::copy_of(small)});
  REQUIRE(seen[0].wait([](Seen& s) { return s.messages.size() == 6; }));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(took >= (wire(large) + 4 * wire(small)) / kRate);
  {
    const std::lock_guard lock(seen[0].mutex);
    CHECK(seen[0].messages[0].first == 2);
    for (std::uint64_t i = 0; i < 5; ++i) {
      CHECK(seen[0].messages[i + 1].first == 1);
      CHECK(seen[0].messages[i + 1].second.round == i);  // per-peer order holds
    }
  }
  // Only that direction is slow: the reverse one has no rate (delivered, nothing to wait for).
  mesh[0]->send(1, Message{0, 1, 0, 0, Payload::copy_of(small)});
  REQUIRE(seen[1].wait([](Seen& s) { return s.messages.size() == 1; }));
  CHECK_THROWS_AS(mesh[1]->set_link_rate(1, 1.0), gradmesh::ContractError);
  CHECK_THROWS_AS(mesh[1]->set_link_rate(0, -1.0), gradmesh::ContractError);
  shutdown_all(mesh);
}
