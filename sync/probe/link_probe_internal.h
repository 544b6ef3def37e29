#pragma once
// Internal to sync/probe/link_probe*.cpp: the probe's constants, clock helpers and LinkProbe::wait
// (a template both files call). Not part of the public interface (sync/probe/link_probe.h).

#include <algorithm>
#include <array>
#include <chrono>
#include <iomanip>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "sync/probe/link_probe.h"

namespace gradmesh::sync {
namespace probe::detail {

constexpr std::size_t kMaxChunkBytes = std::size_t{256} << 10;  // one bulk message
// A transfer goes in about this many messages (of kMinChunkBytes to kMaxChunkBytes each): the
// receiver times it from the first message's arrival to the last's.
constexpr std::uint64_t kMessagesPerTransfer = 8;
constexpr std::size_t kMinChunkBytes = 1024;
constexpr std::size_t kAckPayloadBytes = 24;  // spread, steady time, steady bytes (messages.h)
// A transfer's steady part at its receiver: its messages from the second on while each gap
// between two arrivals stays within kSteadyGapRatio times the median of its first
// kSteadyReferenceGaps gaps, at least kMinSteadyGaps of them. On a shaped link TCP often loses a
// segment in a transfer's slow start: the bytes behind the hole wait at the receiver and come in
// one clump once it is filled (the link was busy meanwhile: the whole spread reads right), but a
// tail loss or a retransmission timeout leaves the link idle for 50-300 ms, which made a
// 0.16 s transfer at 10 Mbit/s read 0.3-0.7 of the rate; the steady part before it did not.
constexpr double kSteadyGapRatio = 1.5;
constexpr std::size_t kSteadyReferenceGaps = 3;
constexpr std::size_t kMinSteadyGaps = 2;
// Each next transfer is this many times larger than the last, at least and at most (the factor
// aims at 1.5 target_seconds from the last transfer's rate).
constexpr double kMinGrowth = 2;
constexpr double kMaxGrowth = 8;
constexpr double kAimAbove = 1.5;
// A transfer is sized to take at most this share of the round's budget left, at the B so far.
constexpr double kBudgetUse = 0.8;
// A link not yet measured (no transfer of target_seconds) may take the probe up to this many
// times budget_s.
constexpr double kOverrunFactor = 3;
constexpr std::uint64_t kMaxBulkBytes = std::uint64_t{1} << 30;  // a sane transfer, for checks
// The per-message overhead burst: this many messages of kBurstMessageBytes each, to the next rank.
constexpr std::size_t kBurstMessages = 64;
constexpr std::size_t kBurstMessageBytes = 64;
constexpr std::size_t kBursts = 3;

inline double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// A kBulkAck's payload: three little-endian u64, the transfer's spread (ns), its steady part's
// time (ns; 0: none) and bytes.
inline net::Payload encode_ack(std::chrono::steady_clock::duration spread,
                               std::chrono::steady_clock::duration steady,
                               std::uint64_t steady_bytes) {
  std::array<std::byte, kAckPayloadBytes> bytes{};
  std::size_t at = 0;
  const auto ns = [](std::chrono::steady_clock::duration d) {
    return static_cast<std::uint64_t>(
        std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
  };
  for (const std::uint64_t value : {ns(spread), ns(steady), steady_bytes})
    for (std::size_t i = 0; i < 8; ++i)
      bytes[at++] = static_cast<std::byte>((value >> (8 * i)) & 0xff);
  return net::Payload::copy_of(bytes);
}

// The u64 at `offset` (0: spread ns, 8: steady ns, 16: steady bytes) of a kBulkAck's payload.
inline std::uint64_t decode_u64(std::span<const std::byte> bytes, std::size_t offset) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i)
    value |= static_cast<std::uint64_t>(bytes[offset + i]) << (8 * i);
  return value;
}

// The steady part of a transfer whose messages after the first arrived as `arrivals` (gap since
// the one before, bytes): its time and bytes, or zeros when it has none (fewer than
// kMinSteadyGaps gaps before a stall, or no stall: then the whole spread reads right).
inline std::pair<std::chrono::steady_clock::duration, std::uint64_t> steady_part(
    const std::vector<std::pair<std::chrono::steady_clock::duration, std::size_t>>& arrivals) {
  using Duration = std::chrono::steady_clock::duration;
  if (arrivals.size() < kMinSteadyGaps) return {Duration{}, 0};
  std::array<Duration, kSteadyReferenceGaps> first{};
  const std::size_t n = std::min(arrivals.size(), kSteadyReferenceGaps);
  for (std::size_t i = 0; i < n; ++i) first[i] = arrivals[i].first;
  std::sort(first.begin(), first.begin() + static_cast<std::ptrdiff_t>(n));
  const double bound = kSteadyGapRatio * seconds(first[n / 2]);
  Duration time{};
  std::uint64_t bytes = 0;
  std::size_t gaps = 0;
  for (const auto& [gap, size] : arrivals) {
    if (seconds(gap) > bound) break;
    time += gap;
    bytes += size;
    ++gaps;
  }
  if (gaps < kMinSteadyGaps || gaps == arrivals.size() || time <= Duration{})
    return {Duration{}, 0};
  // A stall ends it: a gap longer than kSteadyGapRatio times the median of all the gaps too,
  // not merely the end of a shaper's burst allowance (tbf's 32 KB take 0.26 s at 1 Mbit/s: a
  // transfer's first messages arrive faster than the rest, which then all read "long").
  std::vector<Duration> all;  // a handful of gaps, once per transfer
  all.reserve(arrivals.size());
  for (const auto& arrival : arrivals) all.push_back(arrival.first);
  const auto middle = all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2);
  std::nth_element(all.begin(), middle, all.end());
  if (seconds(arrivals[gaps].first) <= kSteadyGapRatio * seconds(*middle)) return {Duration{}, 0};
  return {time, bytes};
}

}  // namespace probe::detail

template <class Ready, class Missing>
void LinkProbe::wait(std::unique_lock<std::mutex>& lock, double bound_s, Ready ready,
                     Missing missing, const std::string& what) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(bound_s));
  for (;;) {
    if (failure_) throw *failure_;
    if (ready()) return;
    if (changed_.wait_until(lock, until) == std::cv_status::timeout) {
      if (failure_) throw *failure_;
      if (ready()) return;
      const std::size_t rank = missing();
      throw PeerError(rank, router_.address(rank), silent_text(rank, bound_s, what));
    }
  }
}

}  // namespace gradmesh::sync
