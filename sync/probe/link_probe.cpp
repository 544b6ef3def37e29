#include "sync/probe/link_probe.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <memory>
#include <span>
#include <sstream>
#include <string>

#include "tasks/profile.h"

namespace gradmesh::sync {

namespace {

using probe::Kind;
using probe::decode_profile;
using probe::encode_profile;
using probe::profile_problem;

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

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

net::Payload encode_nanoseconds(std::chrono::steady_clock::duration d) {
  const auto ns = static_cast<std::uint64_t>(
      std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
  std::array<std::byte, kAckPayloadBytes> bytes{};
  for (std::size_t i = 0; i < kAckPayloadBytes; ++i)
    bytes[i] = static_cast<std::byte>((ns >> (8 * i)) & 0xff);
  return net::Payload::copy_of(bytes);
}

double decode_seconds(std::span<const std::byte> bytes) {
  std::uint64_t ns = 0;
  for (std::size_t i = 0; i < kAckPayloadBytes; ++i)
    ns |= static_cast<std::uint64_t>(bytes[i]) << (8 * i);
  return static_cast<double>(ns) * 1e-9;
}

}  // namespace

LinkProbe::LinkProbe(Channel& channel, LinkProbeOptions options)
    : channel_(channel),
      options_(options),
      stage_(0),
      report_(channel.nodes()),
      incoming_(channel.nodes()),
      outgoing_(channel.nodes()),
      profiles_(channel.nodes()) {
  GRADMESH_CHECK_GT(options_.pings, std::size_t{0}, "LinkProbeOptions::pings");
  GRADMESH_CHECK_GT(options_.min_bulk_bytes, std::size_t{0}, "LinkProbeOptions::min_bulk_bytes");
  GRADMESH_CHECK(options_.max_bulk_bytes >= options_.min_bulk_bytes,
                 "LinkProbeOptions::max_bulk_bytes = " + std::to_string(options_.max_bulk_bytes) +
                     " < min_bulk_bytes = " + std::to_string(options_.min_bulk_bytes));
  GRADMESH_CHECK(options_.max_bulk_bytes <= kMaxBulkBytes,
                 "LinkProbeOptions::max_bulk_bytes = " + std::to_string(options_.max_bulk_bytes));
  for (const auto& [name, value] : {std::pair{"timeout_s", options_.timeout_s},
                                    std::pair{"budget_s", options_.budget_s},
                                    std::pair{"target_seconds", options_.target_seconds}}) {
    GRADMESH_CHECK(std::isfinite(value) && value > 0,
                   std::string("LinkProbeOptions::") + name + " = " + std::to_string(value));
  }
  GRADMESH_CHECK(!options_.max_send_rate ||
                     (std::isfinite(*options_.max_send_rate) && *options_.max_send_rate > 0),
                 "LinkProbeOptions::max_send_rate = " +
                     std::to_string(options_.max_send_rate.value_or(0)));
  stage_ = channel_.route(probe::kStage, [this](std::size_t from, net::Message&& message) {
    on_message(from, std::move(message));
  });
  channel_.on_failure([this](const PeerError& error) { on_failure(error); });
}

// ---- handlers (delivery thread; never block beyond the short state lock) ----

void LinkProbe::on_message(std::size_t from, net::Message&& message) {
  const auto kind = static_cast<Kind>(message.kind);
  const bool empty = message.payload.empty();
  switch (kind) {
    case Kind::kPing:
      if (!empty) break;
      (void)channel_.send(from, net::Message{stage_, static_cast<std::uint16_t>(Kind::kPong),
                                             message.key, 0, net::Payload{}});
      return;  // a failed peer reaches on_failure() through the transport
    case Kind::kPong: {
      const auto now = Clock::now();
      bool expected = false;
      {
        const std::lock_guard lock(mutex_);
        expected = empty && ping_waiting_ && from == ping_to_ && message.key == ping_key_;
        if (expected) {
          ping_waiting_ = false;
          pong_at_ = now;
        }
      }
      if (!expected) break;
      changed_.notify_all();
      return;
    }
    case Kind::kBulk:
      on_bulk(from, message);
      return;
    case Kind::kBulkAck:
      on_ack(from, message);
      return;
    case Kind::kPhase:
    case Kind::kBarrier: {
      if (!empty) break;
      {
        const std::lock_guard lock(mutex_);
        auto& arrivals = gates_[{message.kind, message.key}];
        arrivals.resize(channel_.nodes(), 0);
        ++arrivals[from];
      }
      changed_.notify_all();
      return;
    }
    case Kind::kProfile:
      on_profile(from, message);
      return;
    case Kind::kBulkDone:
      on_done(from, message);
      return;
  }
  channel_.reject(from, stage_,
                  "kind " + std::to_string(message.kind) + " with key " +
                      std::to_string(message.key) + " and " +
                      std::to_string(message.payload.size()) +
                      " payload bytes is no probe message this node expects");
}

void LinkProbe::on_bulk(std::size_t from, const net::Message& message) {
  const auto now = Clock::now();
  const std::size_t n = channel_.nodes();
  const std::size_t size = message.payload.size();
  std::string why;
  if (message.round == 0 || message.round >= n || (from + message.round) % n != channel_.rank()) {
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
      }
      in.expected = message.key;
      in.received += size;
      ++in.messages;
      if (in.received == in.expected) {
        complete = true;
        if (in.messages >= 2) spread = now - in.first_at;
        in.expected = 0;
        in.received = 0;
      }
    }
  }
  if (!why.empty()) {
    channel_.reject(from, stage_, why);
    return;
  }
  if (complete) {
    changed_.notify_all();
    (void)channel_.send(from, net::Message{stage_, static_cast<std::uint16_t>(Kind::kBulkAck),
                                           message.key, message.round,
                                           encode_nanoseconds(spread)});
  }
}

void LinkProbe::on_ack(std::size_t from, const net::Message& message) {
  const auto now = Clock::now();
  const std::size_t n = channel_.nodes();
  bool expected = false;
  {
    const std::lock_guard lock(mutex_);
    Outgoing& out = outgoing_[from];
    expected = message.payload.size() == kAckPayloadBytes && out.acked < out.started &&
               message.key == out.bytes &&
               message.round > 0 && message.round < n &&
               (channel_.rank() + message.round) % n == from;
    if (expected) {
      ++out.acked;
      out.acked_at = now;
      out.receiver_seconds = decode_seconds(message.payload.bytes());
    }
  }
  if (!expected) {
    channel_.reject(from, stage_,
                    "bulk ack of " + std::to_string(message.key) + " bytes, round " +
                        std::to_string(message.round) + ", matches no transfer to that rank");
    return;
  }
  changed_.notify_all();
}

void LinkProbe::on_done(std::size_t from, const net::Message& message) {
  const std::size_t n = channel_.nodes();
  bool expected = message.payload.empty() && message.key == 0 && message.round > 0 &&
                  message.round < n && (from + message.round) % n == channel_.rank();
  if (expected) {
    const std::lock_guard lock(mutex_);
    Incoming& in = incoming_[from];
    expected = in.expected == 0;  // not in the middle of a transfer
    if (expected) ++in.done;
  }
  if (!expected) {
    channel_.reject(from, stage_,
                    "end of bulk round " + std::to_string(message.round) +
                        " matches no transfers from that rank");
    return;
  }
  changed_.notify_all();
}

void LinkProbe::on_profile(std::size_t from, const net::Message& message) {
  std::string why;
  auto profile = decode_profile(message.payload.bytes(), channel_.nodes(), why);
  if (!profile) {
    channel_.reject(from, stage_, why);
    return;
  }
  {
    const std::lock_guard lock(mutex_);
    profiles_[from].push_back(std::move(*profile));
  }
  changed_.notify_all();
}

void LinkProbe::on_failure(const PeerError& error) {
  {
    const std::lock_guard lock(mutex_);
    if (!failure_) failure_ = error;
  }
  changed_.notify_all();
}

// ---- the caller's side ----

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

std::string LinkProbe::measured_text(std::size_t rank) const {
  const LinkReport& link = report_.at(rank);
  if (link.transfers == 0 && link.alpha <= 0) return {};
  std::ostringstream text;
  text << std::setprecision(3) << "; its link measured alpha " << link.alpha * 1e3 << " ms";
  if (link.transfers > 0) {
    text << ", B " << link.bandwidth / 1e6 << " MB/s (a transfer of " << link.bytes
         << " bytes in " << link.seconds * 1e3 << " ms)";
  }
  return text.str();
}

void LinkProbe::send(std::size_t peer, Kind kind, std::uint64_t key, std::uint64_t round,
                     net::Payload payload) {
  if (auto error = channel_.send(peer, net::Message{stage_, static_cast<std::uint16_t>(kind), key,
                                                    round, std::move(payload)})) {
    throw *error;
  }
}

NodeProfile LinkProbe::measure_links() {
  const std::size_t n = channel_.nodes();
  const std::size_t me = channel_.rank();
  NodeProfile row;
  row.alpha.assign(n, 0.0);
  row.bandwidth.assign(n, 0.0);
  report_.assign(n, LinkReport{});
  took_seconds_ = 0;
  if (n == 1) return row;
  GRADMESH_CHECK(channel_.connected(), "LinkProbe::measure_links() without a transport");
  {
    const std::lock_guard lock(mutex_);
    if (failure_) throw *failure_;
  }
  ++phases_;
  // Every node has started its transport before any ping: a pong is sent from the delivery
  // thread, and a transport may refuse sends until its own start() returned.
  // Gate tags: phases_ in the high bits, the gate's index in this call in the low ones.
  const auto tag = [this](std::uint64_t index) { return (phases_ << 20) | index; };
  gate(Kind::kPhase, tag(0), "the start of the probe");
  const auto start = Clock::now();
  const auto budget_end = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options_.budget_s));
  const auto overrun_end = start + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(
                                           kOverrunFactor * options_.budget_s));
  // alpha: ping-pong, one peer at a time, starting at the next rank (so the load spreads).
  for (std::size_t r = 1; r < n; ++r) {
    const std::size_t peer = (me + r) % n;
    row.alpha[peer] = report_[peer].alpha = ping_peer(peer);
  }
  // No node starts its bulk transfers before every node has finished its pings.
  gate(Kind::kPhase, tag(1), "the end of the pings");
  // One buffer, shared by every message (the transport keeps it alive until written).
  auto buffer = std::make_shared<std::vector<std::byte>>(
      std::min(options_.max_bulk_bytes, kMaxChunkBytes));
  // o: bursts of small messages to the next rank (every node at once, as a PS phase is), before
  // the bulk rounds so that a send cap's token bucket is full and paces none of them.
  const std::size_t next = (me + 1) % n;
  const std::size_t burst_bytes = kBurstMessages * kBurstMessageBytes;
  std::vector<double> bursts;
  for (std::size_t b = 0; b < kBursts; ++b) {
    bursts.push_back(transfer(1, buffer, kBurstMessageBytes, burst_bytes, 0).sent_to_ack);
    end_round(1, 0);
  }
  // B: n - 1 rounds, one outgoing and one incoming measurement each, each step with an equal
  // share of the budget left. A round with 2r = n pairs both directions of n / 2 links: it is cut
  // in two steps, the lower half of the ranks sending in the first, the upper in the second, so
  // that no ack waits behind its own node's bulk bytes in the kernel's send buffer (which holds
  // tenths of a second of bytes at 10 Mbit/s, and would add them to the peer's measurement).
  struct Step {
    std::size_t round;
    bool sends;
  };
  std::vector<Step> steps;
  for (std::size_t r = 1; r < n; ++r) {
    if (2 * r == n) {
      steps.push_back({r, me < n / 2});
      steps.push_back({r, me >= n / 2});
    } else {
      steps.push_back({r, true});
    }
  }
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto now = Clock::now();
    const auto share = budget_end > now ? (budget_end - now) / static_cast<long>(steps.size() - i)
                                        : Clock::duration::zero();
    const std::size_t to = (me + steps[i].round) % n;
    if (steps[i].sends) {
      measure_link(steps[i].round, buffer, now + share, overrun_end);
      row.bandwidth[to] = report_[to].bandwidth;
    } else {
      // The peer measures its link to this node.
      end_round(steps[i].round, kOverrunFactor * options_.budget_s);
    }
    // Every node ends the step before any starts the next: a node done early would otherwise
    // send into a link, or a receiver, still busy with the step before (read slow).
    gate(Kind::kPhase, tag(2 + i), "the end of a bulk round");
  }
  // A burst takes 2 alpha + (m - 1) o + bytes / B (first message out, ack back); the median over
  // the bursts, as alpha is a median: one burst can lose the cores to a neighbour.
  for (double& elapsed : bursts) {
    const double rest = elapsed - 2 * row.alpha[next] -
                        static_cast<double>(burst_bytes) / row.bandwidth[next];
    elapsed = std::max(0.0, rest / static_cast<double>(kBurstMessages - 1));
  }
  row.message_seconds = tasks::median(bursts);
  took_seconds_ = seconds(Clock::now() - start);
  return row;
}

void LinkProbe::measure_link(std::size_t round,
                             const std::shared_ptr<std::vector<std::byte>>& buffer,
                             Clock::time_point budget_end, Clock::time_point overrun_end) {
  const std::size_t to = (channel_.rank() + round) % channel_.nodes();
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
    const double receiver_rate =
        spread ? static_cast<double>(bytes - first) / timing.receiver : sender_rate;
    rate = elapsed >= options_.target_seconds ? receiver_rate
                                              : std::min(sender_rate, receiver_rate);
    if (options_.max_send_rate) rate = std::min(rate, *options_.max_send_rate);
    // B: the fastest of the transfers that lasted target_seconds (a loss costs a transfer a
    // retransmission timeout, 200 ms or more, and a descheduled thread its time slice: delays only
    // ever make a transfer read slow), else the last. A shorter one may ride a shaper's burst
    // allowance (tbf) and read fast.
    const auto take = [&](LinkMeasure kind) {
      link.bandwidth = rate;
      link.bytes = bytes;
      link.seconds = elapsed;
      link.kind = kind;
    };
    if (elapsed >= options_.target_seconds) {
      if (link.kind != LinkMeasure::kMeasured || rate > link.bandwidth) take(LinkMeasure::kMeasured);
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
      const double guess = options_.max_send_rate
                               ? std::min(receiver_rate, *options_.max_send_rate)
                               : receiver_rate;
      fits = std::max(fits, std::min(2 * kAimAbove * options_.target_seconds * guess,
                                     kBudgetUse * cost_rate * seconds(overrun_end - now)));
    }
    const double next = std::min({static_cast<double>(bytes) * growth,
                                  static_cast<double>(options_.max_bulk_bytes), fits});
    if (next < static_cast<double>(bytes) + 1) break;
    bytes = static_cast<std::uint64_t>(next);
    expected_s = static_cast<double>(bytes) / cost_rate;
  }
  // The incoming measurement ends within its own share of the budget: about as long as ours.
  end_round(round, std::max(kOverrunFactor * options_.budget_s, link.seconds));
}

double LinkProbe::ping_peer(std::size_t peer) {
  std::vector<double> rtts;
  rtts.reserve(options_.pings);
  for (std::size_t i = 0; i < options_.pings; ++i) {
    std::uint64_t key = 0;
    {
      const std::lock_guard lock(mutex_);
      key = next_ping_key_++;
      ping_to_ = peer;
      ping_key_ = key;
      ping_waiting_ = true;
    }
    const auto sent = Clock::now();
    send(peer, Kind::kPing, key, 0);
    std::unique_lock lock(mutex_);
    wait(lock, options_.timeout_s, [this] { return !ping_waiting_; }, [peer] { return peer; },
         "a ping");
    rtts.push_back(seconds(pong_at_ - sent));
  }
  return tasks::median(rtts) / 2;
}

LinkProbe::Timing LinkProbe::transfer(std::size_t round,
                                     const std::shared_ptr<std::vector<std::byte>>& buffer,
                                     std::size_t message_bytes, std::uint64_t total,
                                     double expected_s) {
  const std::size_t to = (channel_.rank() + round) % channel_.nodes();
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
    const auto size =
        static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), total - sent));
    // Priority 1: an ack, pong or end of round this node owes (priority 0) overtakes the bulk
    // messages it has queued, so that a peer's measurement of the reverse link (rounds with
    // 2r = n pair both directions at once) does not wait behind this one's transfer.
    if (auto error = channel_.send(
            to, net::Message{stage_, static_cast<std::uint16_t>(Kind::kBulk), total, round,
                             net::Payload::view(chunk.first(size), buffer), 1})) {
      throw *error;
    }
    sent += size;
  }
  std::unique_lock lock(mutex_);
  wait(
      lock, expected_s + options_.timeout_s, [&] { return outgoing_[to].acked >= acks; },
      [&] { return to; }, "a bulk transfer of " + std::to_string(total) + " bytes");
  return Timing{seconds(outgoing_[to].acked_at - start), outgoing_[to].receiver_seconds};
}

void LinkProbe::end_round(std::size_t round, double expected_s) {
  const std::size_t n = channel_.nodes();
  const std::size_t to = (channel_.rank() + round) % n;
  const std::size_t from = (channel_.rank() + n - round) % n;
  send(to, Kind::kBulkDone, 0, round);
  std::unique_lock lock(mutex_);
  const std::uint64_t awaited = ++incoming_[from].awaited;
  wait(
      lock, expected_s + options_.timeout_s, [&] { return incoming_[from].done >= awaited; },
      [&] { return from; }, "the end of its bulk transfers");
}

void LinkProbe::gate(Kind kind, std::uint64_t tag, const char* what) {
  const std::size_t n = channel_.nodes();
  const std::size_t me = channel_.rank();
  for (std::size_t peer = 0; peer < n; ++peer) {
    if (peer != me) send(peer, kind, tag, 0);
  }
  const std::pair<std::uint16_t, std::uint64_t> key{static_cast<std::uint16_t>(kind), tag};
  const auto arrived = [&](std::size_t peer) {
    const auto it = gates_.find(key);
    return it != gates_.end() && it->second[peer] > 0;
  };
  std::unique_lock lock(mutex_);
  wait(
      lock, options_.timeout_s,
      [&] {
        for (std::size_t peer = 0; peer < n; ++peer) {
          if (peer != me && !arrived(peer)) return false;
        }
        return true;
      },
      [&] {
        for (std::size_t peer = 0; peer < n; ++peer) {
          if (peer != me && !arrived(peer)) return peer;
        }
        return me;
      },
      what);
  auto it = gates_.find(key);
  bool drained = true;
  for (std::size_t peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    --it->second[peer];
    drained = drained && it->second[peer] == 0;
  }
  if (drained) gates_.erase(it);
}

std::vector<NodeProfile> LinkProbe::exchange(const NodeProfile& local) {
  const std::size_t n = channel_.nodes();
  const std::size_t me = channel_.rank();
  const std::string why = profile_problem(local, n);
  GRADMESH_CHECK(why.empty(), "LinkProbe::exchange(): " + why);
  if (n == 1) return {local};
  GRADMESH_CHECK(channel_.connected(), "LinkProbe::exchange() without a transport");
  {
    const std::lock_guard lock(mutex_);
    if (failure_) throw *failure_;
  }
  const net::Payload payload = encode_profile(local);
  for (std::size_t peer = 0; peer < n; ++peer) {
    if (peer != me) send(peer, Kind::kProfile, 0, 0, payload);
  }
  std::unique_lock lock(mutex_);
  const auto missing = [&]() -> std::size_t {
    for (std::size_t peer = 0; peer < n; ++peer) {
      if (peer != me && profiles_[peer].empty()) return peer;
    }
    return n;
  };
  wait(lock, options_.timeout_s, [&] { return missing() == n; }, missing, "its profile");
  std::vector<NodeProfile> all(n);
  for (std::size_t peer = 0; peer < n; ++peer) {
    if (peer == me) {
      all[peer] = local;
    } else {
      all[peer] = std::move(profiles_[peer].front());
      profiles_[peer].pop_front();
    }
  }
  return all;
}

void LinkProbe::barrier(std::uint64_t tag) {
  if (channel_.nodes() == 1) return;
  GRADMESH_CHECK(channel_.connected(), "LinkProbe::barrier() without a transport");
  {
    const std::lock_guard lock(mutex_);
    if (failure_) throw *failure_;
  }
  gate(Kind::kBarrier, tag, "a barrier");
}

}  // namespace gradmesh::sync
