// Tests for net/rate_limiter.h with an injected clock.

#include "net/rate_limiter.h"

#include <catch2/catch.hpp>

#include "engine/error.h"

using gradmesh::net::RateLimiter;

namespace {
struct FakeClock {
  double now = 100.0;
  RateLimiter::Clock clock() {
    return [this] { return now; };
  }
};
}  // namespace

TEST_CASE("rate limiter starts full and refills at the rate up to capacity",
          "[net][rate_limiter]") {
  FakeClock time;
  RateLimiter limiter(1000.0, 500, time.clock());
  CHECK(limiter.available() == 500);
  limiter.consume(500);
  CHECK(limiter.available() == 0);
  time.now += 0.1;  // 100 bytes
  CHECK(limiter.available() == 100);
  time.now += 10.0;  // capped
  CHECK(limiter.available() == 500);
}

TEST_CASE("rate limiter debt is paid back before new tokens", "[net][rate_limiter]") {
  FakeClock time;
  RateLimiter limiter(1000.0, 500, time.clock());
  limiter.consume(800);  // 300 in debt
  CHECK(limiter.available() == 0);
  CHECK(limiter.seconds_until(100) == Approx(0.4));
  time.now += 0.3;
  CHECK(limiter.available() == 0);
  time.now += 0.1;
  CHECK(limiter.available() == 100);
}

TEST_CASE("rate limiter seconds_until caps the request at capacity", "[net][rate_limiter]") {
  FakeClock time;
  RateLimiter limiter(2000.0, 1000, time.clock());
  limiter.consume(1000);
  CHECK(limiter.seconds_until(0) == 0.0);
  CHECK(limiter.seconds_until(500) == Approx(0.25));
  CHECK(limiter.seconds_until(1u << 30) == Approx(0.5));
  time.now += 0.25;
  CHECK(limiter.seconds_until(500) == Approx(0.0).margin(1e-12));
}

TEST_CASE("rate limiter long-run rate equals the configured rate", "[net][rate_limiter]") {
  FakeClock time;
  RateLimiter limiter(1.0e6, RateLimiter::default_capacity(1.0e6), time.clock());
  std::size_t sent = 0;
  const double start = time.now;
  limiter.consume(limiter.available());  // drain the initial burst
  while (time.now - start < 2.0) {
    const std::size_t n = limiter.available();
    if (n >= 4096) {
      limiter.consume(4096);
      sent += 4096;
    } else {
      time.now += limiter.seconds_until(4096);
    }
  }
  CHECK(static_cast<double>(sent) / (time.now - start) == Approx(1.0e6).epsilon(0.01));
}

TEST_CASE("rate limiter default capacity and bad arguments", "[net][rate_limiter]") {
  CHECK(RateLimiter::default_capacity(1000.0) == 64 * 1024);
  CHECK(RateLimiter::default_capacity(1.0e9) == 10'000'000);
  CHECK_THROWS_AS(RateLimiter(0.0, 10), gradmesh::ConfigError);
  CHECK_THROWS_AS(RateLimiter(-5.0, 10), gradmesh::ConfigError);
  CHECK_THROWS_AS(RateLimiter(5.0, 0), gradmesh::ConfigError);
  CHECK_THROWS_AS(RateLimiter(5.0, 10, &RateLimiter::steady_seconds, 9), gradmesh::ConfigError);
  CHECK(RateLimiter::default_backlog_capacity(1000.0) == 64 * 1024);
  CHECK(RateLimiter::default_backlog_capacity(1.0e9) == 100'000'000);
}

TEST_CASE("rate limiter banks up to the backlog capacity only while bytes wait",
          "[net][rate_limiter]") {
  FakeClock time;
  RateLimiter limiter(1000.0, 500, time.clock(), 2000);
  CHECK(limiter.capacity() == 500);
  CHECK(limiter.backlog_capacity() == 2000);
  limiter.consume(500);
  time.now += 5.0;  // idle: an idle link banks nothing beyond capacity
  CHECK(limiter.available() == 500);
  limiter.consume(500);
  // Bytes have waited since 1 s ago (the writer was descheduled): that link time counts.
  time.now += 1.0;
  limiter.start_backlog(time.now - 1.0);
  CHECK(limiter.backlogged());
  CHECK(limiter.available() == 1000);
  time.now += 5.0;  // still backlogged: capped at the backlog capacity
  CHECK(limiter.available() == 2000);
  limiter.start_backlog(time.now);  // a no-op while backlogged
  CHECK(limiter.available() == 2000);
  limiter.consume(1800);
  limiter.end_backlog();  // nothing waits: 200 kept, and refills stop at capacity again
  CHECK_FALSE(limiter.backlogged());
  CHECK(limiter.available() == 200);
  time.now += 5.0;
  CHECK(limiter.available() == 500);
  limiter.start_backlog(time.now + 3.0);  // a future start is clamped to now
  CHECK(limiter.available() == 500);
  limiter.end_backlog();
  CHECK(limiter.available() == 500);
}

namespace {

/// A writer with bytes always waiting that runs for 50 ms, then is descheduled for 90 ms, for 2 s
/// of `time`; it writes 4 KiB whenever it may. Returns its bytes per second; checks, after every
/// write, that the bytes so far stay within rate x t + `bound`.
double descheduled_writer(RateLimiter& limiter, FakeClock& time, double bound) {
  const double start = time.now;
  limiter.consume(limiter.available());  // drain the initial burst
  limiter.start_backlog(time.now);
  std::size_t sent = 0;
  double next_sleep = time.now + 0.050;
  while (time.now - start < 2.0) {
    if (time.now >= next_sleep) {
      time.now += 0.090;
      next_sleep = time.now + 0.050;
    }
    if (limiter.available() >= 4096) {
      limiter.consume(4096);
      sent += 4096;
      CHECK(static_cast<double>(sent) <= limiter.rate() * (time.now - start) + bound + 4096);
    } else {
      time.now += std::min(limiter.seconds_until(4096), std::max(0.0, next_sleep - time.now));
    }
  }
  return static_cast<double>(sent) / (time.now - start);
}

}  // namespace

TEST_CASE("rate limiter with a backlog: bytes over any interval stay within rate x t + backlog",
          "[net][rate_limiter]") {
  // The descheduled writer catches up on the link time it missed (90 ms < the 100 ms backlog
  // capacity), so its long-run rate is the configured rate, never more.
  const double rate = 1.0e6;
  FakeClock time;
  RateLimiter limiter(rate, RateLimiter::default_capacity(rate), time.clock(),
                      RateLimiter::default_backlog_capacity(rate));
  CHECK(limiter.backlog_capacity() == 100'000);
  CHECK(descheduled_writer(limiter, time, 100'000) == Approx(rate).epsilon(0.02));
  // Without the backlog capacity the same writer loses what its 64 KiB bucket cannot bank:
  // 65.5 KB + 50 KB per 140 ms, 0.83 of the rate.
  FakeClock time2;
  RateLimiter plain(rate, RateLimiter::default_capacity(rate), time2.clock());
  CHECK(descheduled_writer(plain, time2, 65'536) < 0.9 * rate);
}
