// LinkProbe's bulk transfers (sync/probe/link_probe.h): a link's sequence of growing transfers,
// one transfer timed at both ends (the receiver's first-to-last-message time comes back in its
// ack), and the receiving side that counts a transfer's messages and acks it once complete.
#include <algorithm>
#include <array>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sync/probe/link_probe_internal.h"

namespace gradmesh::sync {

using namespace probe::detail;
using probe::Kind;

void LinkProbe::on_bulk(std::size_t from, const net::Message& message) {
  const auto now = Clock::now();
  const std::size_t n = router_.nodes();
  const std::size_t size = message.payload.size();
  std::string why;
  if (message.round == 0 || message.round >= n || (from + message.round) % n != router_.rank()) {
    why = "bulk round " + std::to_string(message.round) + " from rank " + std::to_string(from) +
          " is not addressed to this rank";
  } else if (size == 0 || size > kMaxChunkBytes) {
    why = "bulk message of " + std::to_string(size) + " bytes, expected 1 to " +
          std::to_string(kMaxChunkBytes);
  } else if (message.key == 0 || message.key > kMaxBulkBytes) {
    why = "bulk transfer of " + std::to_string(message.key) + " bytes, expected 1 to " +
          std::to_string(kMaxBulkBytes);
  }
  bool complete = false;
  Clock::duration spread{};  // first to last message of a complete transfer
  Clock::duration steady{};  // its steady part (link_probe_internal.h), and its bytes
  std::uint64_t steady_bytes = 0;
  if (why.empty()) {
    const std::lock_guard lock(mutex_);
    Incoming& in = incoming_[from];
    if (in.expected != 0 && in.expected != message.key) {
      why = "bulk transfer of " + std::to_string(message.key) + " bytes while one of " +
            std::to_string(in.expected) + " is under way";
    } else if ((in.expected == 0 ? message.key : in.expected - in.received) < size) {
      why = "bulk message of " + std::to_string(size) + " bytes overruns its transfer";
    } else {
      if (in.expected == 0) {
        in.messages = 0;
        in.first_at = now;
        in.arrivals.clear();  // keeps its capacity
      } else {
        in.arrivals.emplace_back(now - in.last_at, size);
      }
      in.last_at = now;
      in.expected = message.key;
      in.received += size;
      bulk_bytes_received_ += size;
      ++in.messages;
      if (in.received == in.expected) {
        complete = true;
        if (in.messages >= 2) spread = now - in.first_at;
        std::tie(steady, steady_bytes) = steady_part(in.arrivals);
        in.expected = 0;
        in.received = 0;
      }
    }
  }
  if (!why.empty()) {
    router_.reject(from, lane_, why);
    return;
  }
  if (complete) {
    changed_.notify_all();
    (void)router_.send(from,
                       net::Message{lane_, static_cast<std::uint16_t>(Kind::kBulkAck), message.key,
                                    message.round, encode_ack(spread, steady, steady_bytes)});
  }
}

void LinkProbe::on_ack(std::size_t from, const net::Message& message) {
  const auto now = Clock::now();
  const std::size_t n = router_.nodes();
  bool expected = false;
  {
    const std::lock_guard lock(mutex_);
    Outgoing& out = outgoing_[from];
    expected = message.payload.size() == kAckPayloadBytes && out.acked < out.started &&
               message.key == out.bytes && message.round > 0 && message.round < n &&
               (router_.rank() + message.round) % n == from;
    if (expected) {
      ++out.acked;
      out.acked_at = now;
      const auto payload = message.payload.bytes();
      out.receiver_seconds = static_cast<double>(decode_u64(payload, 0)) * 1e-9;
      out.steady_seconds = static_cast<double>(decode_u64(payload, 8)) * 1e-9;
      out.steady_bytes = decode_u64(payload, 16);
    }
  }
  if (!expected) {
    router_.reject(from, lane_,
                   "bulk ack of " + std::to_string(message.key) + " bytes, round " +
                       std::to_string(message.round) + ", matches no transfer to that rank");
    return;
  }
  changed_.notify_all();
}

void LinkProbe::measure_link(std::size_t round,
                             const std::shared_ptr<std::vector<std::byte>>& buffer,
                             Clock::time_point budget_end, Clock::time_point overrun_end) {
  const std::size_t to = (router_.rank() + round) % router_.nodes();
  LinkReport& link = report_[to];
  std::uint64_t bytes = options_.min_bulk_bytes;
  double expected_s = 0;  // what the next transfer should take at the B measured so far
  double rate = 0;        // B of the last transfer
  for (;;) {
    const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(
        std::max<std::uint64_t>(bytes / kMessagesPerTransfer, kMinChunkBytes), buffer->size()));
    const Timing timing = transfer(round, buffer, chunk, bytes, expected_s);
    ++link.transfers;
    // Two clocks. The receiver's, from the first message's arrival to the last's (the bytes after
    // the first message over that time), leaves out the ack's trip back: on a shaped link the
    // ack waits in the receiver's egress queue behind the receiver's own bulk transfer of the
    // same step (tbf's queue: up to 0.3 s at 1 Mbit/s, 76 ms at 10 Mbit/s), which made the
    // sender's clock read such links at a fraction of their rate. The sender's, from the first
    // send to the ack less alpha (at least half of it kept, so that a tiny transfer cannot read
    // as infinitely fast), is what a transfer costs the budget, and the only clock for a transfer
    // of one message.
    const std::uint64_t first = std::min<std::uint64_t>(chunk, bytes);
    const bool spread = timing.receiver > 0 && bytes > first;
    const double sender_rate =
        static_cast<double>(bytes) /
        std::max({timing.sent_to_ack - link.alpha, timing.sent_to_ack / 2, 1e-9});
    const double elapsed = spread ? timing.receiver : timing.sent_to_ack;
    // Long enough (target_seconds on its clock): the receiver's rate. Shorter: an estimate, the
    // lower of the two (a short transfer may arrive in one clump, or ride a shaper's burst
    // allowance: its receiver's rate can read anything).
    double receiver_rate =
        spread ? static_cast<double>(bytes - first) / timing.receiver : sender_rate;
    // The steady part before a stall (link_probe_internal.h), if it lasted a third of
    // target_seconds: a stall left the link idle; the whole spread counts that idle time.
    bool steady = false;
    if (spread && elapsed >= options_.target_seconds &&
        timing.steady >= options_.target_seconds / 3) {
      const double steady_rate = static_cast<double>(timing.steady_bytes) / timing.steady;
      if (steady_rate > receiver_rate) {
        receiver_rate = steady_rate;
        steady = true;
      }
    }
    rate =
        elapsed >= options_.target_seconds ? receiver_rate : std::min(sender_rate, receiver_rate);
    if (options_.max_send_rate) rate = std::min(rate, *options_.max_send_rate);
    // B: the fastest of the transfers that lasted target_seconds (a loss costs a transfer a
    // retransmission timeout, 200 ms or more, and a descheduled thread its time slice: delays only
    // ever make a transfer read slow), else the last. A shorter one may ride a shaper's burst
    // allowance (tbf) and read fast.
    const auto take = [&](LinkMeasure kind) {
      link.steady = steady;
      link.bandwidth = rate;
      link.bytes = bytes;
      link.seconds = elapsed;
      link.kind = kind;
    };
    if (elapsed >= options_.target_seconds) {
      if (link.kind != LinkMeasure::kMeasured || rate > link.bandwidth)
        take(LinkMeasure::kMeasured);
    } else if (link.kind != LinkMeasure::kMeasured) {
      take(LinkMeasure::kEstimate);
    }
    if (bytes >= options_.max_bulk_bytes) {
      if (link.kind != LinkMeasure::kMeasured) link.kind = LinkMeasure::kAtBound;
      break;
    }
    // Larger, as long as the next transfer fits the round's budget at the last B (which errs
    // low while alpha and TCP's slow start weigh on a small transfer: the prediction errs long).
    // The longest transfer that fits measures best: scheduling noise and the ack's trip shrink
    // against it.
    const double growth = std::clamp(kAimAbove * options_.target_seconds / std::max(elapsed, 1e-9),
                                     kMinGrowth, kMaxGrowth);
    // What a transfer costs the budget: the sender's whole time, the ack's trip included.
    // A send cap's token bucket lets a short transfer out at once: the cap bounds the cost too.
    double cost_rate = static_cast<double>(bytes) / std::max(timing.sent_to_ack, 1e-9);
    if (options_.max_send_rate) cost_rate = std::min(cost_rate, *options_.max_send_rate);
    const auto now = Clock::now();
    double fits = kBudgetUse * cost_rate * std::max(seconds(budget_end - now), 0.0);
    if (link.kind != LinkMeasure::kMeasured && now < overrun_end) {
      // No transfer of target_seconds yet: the link may overrun its share, up to overrun_end for
      // the whole probe, with a transfer sized to last 2 x 1.5 target_seconds at the receiver's
      // rate (on a slow link the first transfers' acks can take the step's whole share, and a
      // measurement beats an estimate).
      const double guess =
          options_.max_send_rate ? std::min(receiver_rate, *options_.max_send_rate) : receiver_rate;
      fits = std::max(fits, std::min(2 * kAimAbove * options_.target_seconds * guess,
                                     kBudgetUse * cost_rate * seconds(overrun_end - now)));
    }
    const double next = std::min(
        {static_cast<double>(bytes) * growth, static_cast<double>(options_.max_bulk_bytes), fits});
    if (next < static_cast<double>(bytes) + 1) break;
    bytes = static_cast<std::uint64_t>(next);
    expected_s = static_cast<double>(bytes) / cost_rate;
  }
  // The incoming measurement ends within its own share of the budget: about as long as ours.
  end_round(round, std::max(kOverrunFactor * options_.budget_s, link.seconds));
}

LinkProbe::Timing LinkProbe::transfer(std::size_t round,
                                      const std::shared_ptr<std::vector<std::byte>>& buffer,
                                      std::size_t message_bytes, std::uint64_t total,
                                      double expected_s) {
  const std::size_t to = (router_.rank() + round) % router_.nodes();
  std::uint64_t acks = 0;
  {
    const std::lock_guard lock(mutex_);
    Outgoing& out = outgoing_[to];
    acks = ++out.started;
    out.bytes = total;
  }
  const std::span<const std::byte> chunk(buffer->data(), std::min(message_bytes, buffer->size()));
  const auto start = Clock::now();
  for (std::uint64_t sent = 0; sent < total;) {
    const auto size = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), total - sent));
    // Priority 1: an ack, pong or end of round this node owes (priority 0) overtakes the bulk
    // messages it has queued, so that a peer's measurement of the reverse link (rounds with
    // 2r = n pair both directions at once) does not wait behind this one's transfer.
    if (auto error = router_.send(
            to, net::Message{lane_, static_cast<std::uint16_t>(Kind::kBulk), total, round,
                             net::Payload::view(chunk.first(size), buffer), 1})) {
      throw *error;
    }
    sent += size;
  }
  bulk_bytes_sent_ += total;
  std::unique_lock lock(mutex_);
  wait(
      lock, expected_s + options_.timeout_s, [&] { return outgoing_[to].acked >= acks; },
      [&] { return to; }, "a bulk transfer of " + std::to_string(total) + " bytes");
  const Outgoing& out = outgoing_[to];
  return Timing{seconds(out.acked_at - start), out.receiver_seconds, out.steady_seconds,
                out.steady_bytes};
}

}  // namespace gradmesh::sync
