// Tests for sync/ako/send_rate_meter.cpp: the send rate, gradient rate and per-link round bytes
// an Ako node measures at its final p, pauses left out.

#include "sync/ako/send_rate_meter.h"

#include <chrono>
#include <vector>

#include <catch2/catch.hpp>

using gradmesh::sync::ako::SendRateMeter;
using namespace std::chrono_literals;

namespace {

const SendRateMeter::Clock::time_point kT0{};  // the clock's epoch: times as offsets from it

}  // namespace

TEST_CASE("the window opens at the first steady round and counts the bytes after it",
          "[ako][meter]") {
  SendRateMeter meter(3);
  CHECK(meter.figures().seconds == 0);  // no round yet
  meter.round(kT0 + 1s, 10, 500.0, {0.0, 100.0, 200.0});
  const SendRateMeter::Figures one = meter.figures();
  CHECK(one.seconds == 0);  // one round: no window
  CHECK(one.send_rate == 0);
  CHECK(one.link_round_bytes == std::vector<double>{0.0, 100.0, 200.0});
  meter.round(kT0 + 3s, 30, 1000.0, {0.0, 300.0, 400.0});
  meter.round(kT0 + 5s, 50, 1000.0, {0.0, 200.0, 0.0});
  const SendRateMeter::Figures f = meter.figures();
  CHECK(f.seconds == Approx(4.0));
  CHECK(f.send_rate == Approx(2000.0 / 4.0));     // the first round's 500 went before the window
  CHECK(f.gamma == Approx(40.0 / 4.0));           // clocks 10 -> 50
  CHECK(f.link_round_bytes[1] == Approx(200.0));  // (100 + 300 + 200) / 3
  CHECK(f.link_round_bytes[2] == Approx(200.0));  // (200 + 400 + 0) / 3
}

TEST_CASE("pauses inside the window are left out, parts outside it are not counted",
          "[ako][meter]") {
  SendRateMeter meter(2);
  meter.pause(true, kT0 + 0s);  // before the window: only its part inside counts
  meter.pause(false, kT0 + 2s);
  meter.round(kT0 + 1s, 0, 0.0, {0.0, 1.0});
  meter.pause(true, kT0 + 4s);  // inside
  meter.pause(false, kT0 + 6s);
  meter.round(kT0 + 11s, 20, 800.0, {0.0, 1.0});
  meter.pause(true, kT0 + 12s);  // after the window, still open
  const SendRateMeter::Figures f = meter.figures();
  CHECK(f.seconds == Approx(10.0 - 1.0 - 2.0));  // 1 s of the first pause, 2 s of the second
  CHECK(f.send_rate == Approx(800.0 / 7.0));
  CHECK(f.gamma == Approx(20.0 / 7.0));
}
