// Tests for net/tcp/write_queue.h: the order of a connection's frames not yet started.

#include "net/tcp/write_queue.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "net/frame.h"

using namespace gradmesh::net;
using gradmesh::net::detail::WriteCandidate;
using gradmesh::net::detail::WriteQueue;

namespace {

constexpr std::size_t kControl = 2;  // the "control" counter lane of a 2-lane transport

std::unique_ptr<OutgoingFrame> data(std::uint8_t lane, std::uint32_t priority, std::uint64_t key) {
  Message message;
  message.lane = lane;
  message.key = key;
  message.priority = priority;
  return encode_data(message);
}

// Pushes `frame` and returns its address, to recognise it when popped.
const OutgoingFrame* push(WriteQueue& queue, std::unique_ptr<OutgoingFrame> frame) {
  const OutgoingFrame* raw = frame.get();
  queue.push(std::move(frame));
  return raw;
}

std::vector<WriteCandidate> candidates(const WriteQueue& queue, bool by_lane) {
  std::vector<WriteCandidate> out;
  queue.for_each_candidate(by_lane, [&](const WriteCandidate& c) { out.push_back(c); });
  return out;
}

}  // namespace

TEST_CASE("data frames of one lane go by priority, then queue order", "[net][schedule]") {
  WriteQueue queue;
  const auto* a = push(queue, data(0, 5, 1));
  const auto* b = push(queue, data(0, 5, 2));
  const auto* c = push(queue, data(0, 0, 3));
  const auto* d = push(queue, data(0, 5, 4));
  const auto* e = push(queue, data(0, 1, 5));
  for (const auto* expected : {c, e, a, b, d}) {
    const auto next = candidates(queue, true);
    REQUIRE(next.size() == 1);
    CHECK(next[0].priority == expected->priority);
    CHECK_FALSE(next[0].urgent);
    CHECK(next[0].remaining == expected->wire_bytes());
    const auto popped = queue.pop(0);
    CHECK(popped.get() == expected);
  }
  CHECK(queue.empty());
  CHECK(queue.pop(0) == nullptr);
}

TEST_CASE("control frames go first and the Goodbye last, whatever the data's priority",
          "[net][schedule]") {
  WriteQueue queue;
  const auto* low = push(queue, data(0, std::numeric_limits<std::uint32_t>::max(), 1));
  const auto* goodbye = push(queue, encode_goodbye(kControl));
  const auto* high = push(queue, data(1, 0, 2));
  const auto* hello = push(queue, encode_hello_ack(0, kControl));
  const auto* abort = push(queue, encode_abort("stop", kControl));

  auto next = candidates(queue, true);
  REQUIRE(next.size() == 1);
  CHECK(next[0].urgent);
  CHECK(next[0].lane == kControl);
  CHECK(queue.pop(1).get() == hello);  // control frames in queue order, before any data
  CHECK(queue.pop(1).get() == abort);
  next = candidates(queue, true);
  REQUIRE(next.size() == 2);  // one candidate per lane
  CHECK_FALSE(next[0].urgent);
  CHECK(queue.pop(1).get() == high);
  CHECK(queue.pop(0).get() == low);
  next = candidates(queue, true);
  REQUIRE(next.size() == 1);
  CHECK(next[0].urgent);
  CHECK(queue.pop(0).get() == goodbye);
  CHECK(queue.empty());
}

TEST_CASE("by lane each lane offers its best frame, otherwise one order over all lanes",
          "[net][schedule]") {
  WriteQueue queue;
  const auto* s0_late = push(queue, data(0, 3, 1));
  const auto* s1 = push(queue, data(1, 1, 2));
  const auto* s0 = push(queue, data(0, 1, 3));

  auto by_lane = candidates(queue, true);
  REQUIRE(by_lane.size() == 2);
  CHECK(by_lane[0].lane == 0);
  CHECK(by_lane[0].priority == 1);
  CHECK(by_lane[1].lane == 1);
  CHECK(by_lane[1].priority == 1);

  // One order: equal priorities in queue order across lanes (s1 was queued before s0).
  auto one_order = candidates(queue, false);
  REQUIRE(one_order.size() == 1);
  CHECK(one_order[0].lane == 1);

  CHECK(queue.pop(0).get() == s0);  // the chosen lane's best
  CHECK(queue.pop(7).get() == s1);  // a lane with nothing queued: the best over all
  CHECK(queue.pop(1).get() == s0_late);
  CHECK(queue.empty());
}

TEST_CASE("clear drops every queued frame", "[net][schedule]") {
  WriteQueue queue;
  push(queue, data(0, 0, 1));
  push(queue, data(1, 2, 2));
  push(queue, encode_goodbye(kControl));
  push(queue, encode_hello_ack(0, kControl));
  CHECK_FALSE(queue.empty());
  queue.clear();
  CHECK(queue.empty());
  CHECK(candidates(queue, true).empty());
  // Reusable after clear: sequence numbers keep counting up.
  const auto* again = push(queue, data(0, 0, 3));
  CHECK(again->sequence == 4);
  CHECK(queue.pop(0).get() == again);
}
