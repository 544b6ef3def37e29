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

TEST_CASE("rate limiter starts full and refills at the rate up to capacity", "[net][rate_limiter]") {
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
}
