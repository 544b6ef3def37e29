// Tests for net/tcp/liveness_query.cpp: the question a node asks its peers about a silent one,
// without sockets (the end-to-end cases are in liveness_test.cpp).

#include "net/tcp/liveness_query.h"

#include <vector>

#include <catch2/catch.hpp>

using gradmesh::net::tcp::LivenessQuery;
using Answer = LivenessQuery::Answer;

namespace {

constexpr std::uint64_t kTimeoutMs = 1000;

}  // namespace

TEST_CASE("every asked peer answering that it does not hear the silent one settles it",
          "[net][liveness]") {
  LivenessQuery q;  // about rank 1, asked by rank 0, of 4: ranks 2 and 3 asked
  CHECK_FALSE(q.open());
  CHECK(q.report(2, 5000, 10'000, kTimeoutMs) == Answer::kIgnored);  // nothing asked yet
  q.start(10'000, {false, false, true, true});
  CHECK(q.open());
  CHECK(q.report(2, 5000, 10'100, kTimeoutMs) == Answer::kPending);
  CHECK(q.report(2, 5000, 10'200, kTimeoutMs) == Answer::kIgnored);  // answered already
  CHECK(q.report(1, 5000, 10'200, kTimeoutMs) == Answer::kIgnored);  // not asked
  CHECK(q.report(3, 7000, 10'300, kTimeoutMs) == Answer::kSettled);
  CHECK_FALSE(q.vouched());
}

TEST_CASE("a peer that heard it within the timeout vouches for it and closes the question",
          "[net][liveness]") {
  LivenessQuery q;
  q.start(20'000, {false, false, true, true});
  CHECK(q.report(3, 300, 20'500, kTimeoutMs) == Answer::kVouched);
  CHECK_FALSE(q.open());
  CHECK(q.vouched());
  CHECK(q.silent_by_reports_ms(21'000) == 800);                      // heard at 20,200 by rank 3
  CHECK(q.report(2, 5000, 21'000, kTimeoutMs) == Answer::kIgnored);  // closed: moot
  // A later vouch moves the time forward, an older one does not move it back.
  q.start(30'000, {false, false, true, false});
  CHECK(q.report(2, 9999, 30'000, 10'000) == Answer::kVouched);  // heard at 20,001: older
  CHECK(q.silent_by_reports_ms(30'000) == 9'800);                // still 20,200
  q.reset();                                                     // a new connection
  CHECK_FALSE(q.vouched());
  CHECK(q.silent_by_reports_ms(40'000) == 40'000);
}

TEST_CASE("an asked peer that fails counts as one that does not hear", "[net][liveness]") {
  LivenessQuery q;
  CHECK(q.peer_failed(2) == Answer::kIgnored);  // no question out
  q.start(5'000, {false, false, true, true, true});
  CHECK(q.peer_failed(3) == Answer::kPending);
  CHECK(q.peer_failed(0) == Answer::kIgnored);  // not asked
  CHECK(q.report(4, 2000, 5'500, kTimeoutMs) == Answer::kPending);
  CHECK(q.peer_failed(2) == Answer::kSettled);
  q.close();
  CHECK_FALSE(q.open());
}
