#include "net/rate_limiter.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "engine/error.h"

namespace gradmesh::net {

double RateLimiter::steady_seconds() noexcept {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::size_t RateLimiter::default_capacity(double rate) noexcept {
  constexpr std::size_t kMinCapacity = 64 * 1024;
  return std::max(kMinCapacity, static_cast<std::size_t>(rate * 0.010));
}

RateLimiter::RateLimiter(double rate, std::size_t capacity, Clock clock)
    : rate_(rate), capacity_(capacity), clock_(std::move(clock)) {
  if (!(rate > 0.0) || !std::isfinite(rate))
    throw ConfigError("rate limiter: rate must be a finite number of bytes/s > 0, got " +
                      std::to_string(rate));
  if (capacity == 0) throw ConfigError("rate limiter: capacity must be > 0 bytes, got 0");
  if (!clock_) throw ConfigError("rate limiter: clock must not be empty");
  tokens_ = static_cast<double>(capacity_);
  last_ = clock_();
}

void RateLimiter::refill() {
  const double now = clock_();
  if (now > last_) {
    tokens_ = std::min(static_cast<double>(capacity_), tokens_ + (now - last_) * rate_);
    last_ = now;
  }
}

std::size_t RateLimiter::available() {
  refill();
  // The tolerance absorbs rounding, so that waiting seconds_until(n) always yields available() >= n.
  constexpr double kRoundingTolerance = 1e-6;
  return tokens_ + kRoundingTolerance <= 0.0 ? 0
                                             : static_cast<std::size_t>(tokens_ + kRoundingTolerance);
}

void RateLimiter::consume(std::size_t bytes) {
  refill();
  tokens_ -= static_cast<double>(bytes);
}

double RateLimiter::seconds_until(std::size_t bytes) {
  refill();
  const double needed = static_cast<double>(std::min(bytes, capacity_));
  return tokens_ >= needed ? 0.0 : (needed - tokens_) / rate_;
}

}  // namespace gradmesh::net
