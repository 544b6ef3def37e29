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

#include "sync/probe/link_probe.h"

namespace gradmesh::sync {
namespace probe::detail {

constexpr std::size_t kMaxChunkBytes = std::size_t{256} << 10;   // one bulk message
// A transfer goes in about this many messages (of kMinChunkBytes to kMaxChunkBytes each): the
// receiver times it from the first message's arrival to the last's.
constexpr std::uint64_t kMessagesPerTransfer = 8;
constexpr std::size_t kMinChunkBytes = 1024;
constexpr std::size_t kAckPayloadBytes = 8;  // the receiver's nanoseconds (messages.h)
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
constexpr std::uint64_t kMaxBulkBytes = std::uint64_t{1} << 30;   // a sane transfer, for checks
// The per-message overhead burst: this many messages of kBurstMessageBytes each, to the next rank.
constexpr std::size_t kBurstMessages = 64;
constexpr std::size_t kBurstMessageBytes = 64;
constexpr std::size_t kBursts = 3;

inline double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

inline net::Payload encode_nanoseconds(std::chrono::steady_clock::duration d) {
  const auto ns = static_cast<std::uint64_t>(
      std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
  std::array<std::byte, kAckPayloadBytes> bytes{};
  for (std::size_t i = 0; i < kAckPayloadBytes; ++i)
    bytes[i] = static_cast<std::byte>((ns >> (8 * i)) & 0xff);
  return net::Payload::copy_of(bytes);
}

inline double decode_seconds(std::span<const std::byte> bytes) {
  std::uint64_t ns = 0;
  for (std::size_t i = 0; i < kAckPayloadBytes; ++i)
    ns |= static_cast<std::uint64_t>(bytes[i]) << (8 * i);
  return static_cast<double>(ns) * 1e-9;
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
      std::ostringstream message;
      message << "did not answer the link probe (" << what << ") within " << std::setprecision(3)
              << bound_s << " s" << measured_text(rank);
      throw PeerError(rank, channel_.address(rank), message.str());
    }
  }
}

}  // namespace gradmesh::sync
