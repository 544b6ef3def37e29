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

std::size_t RateLimiter::default_backlog_capacity(double rate) noexcept {
  return std::max(default_capacity(rate), static_cast<std::size_t>(rate * 0.100));
}

RateLimiter::RateLimiter(double rate, std::size_t capacity, Clock clock,
                         std::size_t backlog_capacity)
    : rate_(rate),
      capacity_(capacity),
      backlog_capacity_(backlog_capacity == 0 ? capacity : backlog_capacity),
      clock_(std::move(clock)) {
  if (!(rate > 0.0) || !std::isfinite(rate))
    throw ConfigError("rate limiter: rate must be a finite number of bytes/s > 0, got " +
                      std::to_string(rate));
  if (capacity == 0) throw ConfigError("rate limiter: capacity must be > 0 bytes, got 0");
  if (backlog_capacity_ < capacity_)
    throw ConfigError("rate limiter: backlog capacity (" + std::to_string(backlog_capacity_) +
                      " bytes) must be at least the capacity (" + std::to_string(capacity_) +
                      " bytes)");
  if (!clock_) throw ConfigError("rate limiter: clock must not be empty");
  tokens_ = static_cast<double>(capacity_);
  last_ = clock_();
}

void RateLimiter::refill() {
  const double now = clock_();
  if (now > last_) {
    const double cap = static_cast<double>(backlogged_ ? backlog_capacity_ : capacity_);
    tokens_ = std::min(cap, tokens_ + (now - last_) * rate_);
    last_ = now;
  }
}

void RateLimiter::start_backlog(double since) {
  if (backlogged_) return;
  const double now = clock_();
  since = std::clamp(since, std::min(last_, now), now);
  if (since > last_) {  // idle until `since`: refill up to capacity
    tokens_ = std::min(static_cast<double>(capacity_), tokens_ + (since - last_) * rate_);
    last_ = since;
  }
  backlogged_ = true;
  refill();  // backlogged from `since` to now
}

void RateLimiter::end_backlog() {
  refill();  // the time until now counts as backlogged
  backlogged_ = false;
  tokens_ = std::min(tokens_, static_cast<double>(capacity_));
}

std::size_t RateLimiter::available() {
  refill();
  // The tolerance absorbs rounding, so that waiting seconds_until(n) always yields available() >=
  // n.
  constexpr double kRoundingTolerance = 1e-6;
  return tokens_ + kRoundingTolerance <= 0.0
             ? 0
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
