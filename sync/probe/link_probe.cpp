#include "sync/probe/link_probe.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>

#include "sync/probe/link_probe_internal.h"
#include "tasks/profile.h"

namespace gradmesh::sync {

using namespace probe::detail;

namespace {
using probe::decode_profile;
using probe::encode_profile;
using probe::Kind;
using probe::profile_problem;
}  // namespace

LinkProbe::LinkProbe(LaneRouter& router, LinkProbeOptions options)
    : router_(router),
      options_(options),
      lane_(lane_id(probe::kLane)),
      report_(router.nodes()),
      incoming_(router.nodes()),
      outgoing_(router.nodes()),
      phase_gate_(router, lane_, static_cast<std::uint16_t>(probe::Kind::kPhase)),
      barrier_(router, lane_, static_cast<std::uint16_t>(probe::Kind::kBarrier)),
      profiles_(router, lane_, static_cast<std::uint16_t>(probe::Kind::kProfile)) {
  GRADMESH_CHECK_GT(options_.pings, std::size_t{0}, "LinkProbeOptions::pings");
  GRADMESH_CHECK_GT(options_.min_bulk_bytes, std::size_t{0}, "LinkProbeOptions::min_bulk_bytes");
  GRADMESH_CHECK(options_.max_bulk_bytes >= options_.min_bulk_bytes,
                 "LinkProbeOptions::max_bulk_bytes = " + std::to_string(options_.max_bulk_bytes) +
                     " < min_bulk_bytes = " + std::to_string(options_.min_bulk_bytes));
  GRADMESH_CHECK(options_.max_bulk_bytes <= kMaxBulkBytes,
                 "LinkProbeOptions::max_bulk_bytes = " + std::to_string(options_.max_bulk_bytes));
  for (const auto& [name, value] :
       {std::pair{"timeout_s", options_.timeout_s}, std::pair{"budget_s", options_.budget_s},
        std::pair{"target_seconds", options_.target_seconds}}) {
    GRADMESH_CHECK(std::isfinite(value) && value > 0,
                   std::string("LinkProbeOptions::") + name + " = " + std::to_string(value));
  }
  GRADMESH_CHECK(
      !options_.max_send_rate ||
          (std::isfinite(*options_.max_send_rate) && *options_.max_send_rate > 0),
      "LinkProbeOptions::max_send_rate = " + std::to_string(options_.max_send_rate.value_or(0)));
  router_.route(probe::kLane, [this](std::size_t from, net::Message&& message) {
    on_message(from, std::move(message));
  });
  router_.on_failure([this](const PeerError& error) { on_failure(error); });
}

// ---- handlers (delivery thread; never block beyond the short state lock) ----

void LinkProbe::on_message(std::size_t from, net::Message&& message) {
  const auto kind = static_cast<Kind>(message.kind);
  const bool empty = message.payload.empty();
  switch (kind) {
    case Kind::kPing:
      if (!empty) break;
      (void)router_.send(from, net::Message{lane_, static_cast<std::uint16_t>(Kind::kPong),
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
      phase_gate_.on_message(from, std::move(message));
      return;
    case Kind::kBarrier:
      barrier_.on_message(from, std::move(message));
      return;
    case Kind::kProfile:
      on_profile(from, std::move(message));
      return;
    case Kind::kBulkDone:
      on_done(from, message);
      return;
  }
  router_.reject(from, lane_,
                 "kind " + std::to_string(message.kind) + " with key " +
                     std::to_string(message.key) + " and " +
                     std::to_string(message.payload.size()) +
                     " payload bytes is no probe message this node expects");
}

void LinkProbe::on_done(std::size_t from, const net::Message& message) {
  const std::size_t n = router_.nodes();
  bool expected = message.payload.empty() && message.key == 0 && message.round > 0 &&
                  message.round < n && (from + message.round) % n == router_.rank();
  if (expected) {
    const std::lock_guard lock(mutex_);
    Incoming& in = incoming_[from];
    expected = in.expected == 0;  // not in the middle of a transfer
    if (expected) ++in.done;
  }
  if (!expected) {
    router_.reject(from, lane_,
                   "end of bulk round " + std::to_string(message.round) +
                       " matches no transfers from that rank");
    return;
  }
  changed_.notify_all();
}

void LinkProbe::on_profile(std::size_t from, net::Message&& message) {
  std::string why;
  auto profile = decode_profile(message.payload.bytes(), router_.nodes(), why);
  if (!profile) {
    router_.reject(from, lane_, why);
    return;
  }
  profiles_.on_message(from, std::move(message));  // decoded again by exchange()
}

void LinkProbe::on_failure(const PeerError& error) {
  {
    const std::lock_guard lock(mutex_);
    if (!failure_) failure_ = error;
  }
  changed_.notify_all();
  phase_gate_.fail(error);
  barrier_.fail(error);
  profiles_.fail(error);
}

// ---- the caller's side ----

std::string LinkProbe::measured_text(std::size_t rank) const {
  const LinkReport& link = report_.at(rank);
  if (link.transfers == 0 && link.alpha <= 0) return {};
  std::ostringstream text;
  text << std::setprecision(3) << "; its link measured alpha " << link.alpha * 1e3 << " ms";
  if (link.transfers > 0) {
    text << ", B " << link.bandwidth / 1e6 << " MB/s (a transfer of " << link.bytes << " bytes in "
         << link.seconds * 1e3 << " ms)";
  }
  return text.str();
}

void LinkProbe::send(std::size_t peer, Kind kind, std::uint64_t key, std::uint64_t round,
                     net::Payload payload) {
  if (auto error = router_.send(peer, net::Message{lane_, static_cast<std::uint16_t>(kind), key,
                                                   round, std::move(payload)})) {
    throw *error;
  }
}

std::uint64_t LinkProbe::bulk_bytes_received() {
  const std::lock_guard lock(mutex_);
  return bulk_bytes_received_;
}

NodeProfile LinkProbe::measure_links() {
  const std::size_t n = router_.nodes();
  const std::size_t me = router_.rank();
  NodeProfile row;
  row.alpha.assign(n, 0.0);
  row.bandwidth.assign(n, 0.0);
  report_.assign(n, LinkReport{});
  took_seconds_ = 0;
  transport_cpu_seconds_per_byte_ = 0;
  if (n == 1) return row;
  GRADMESH_CHECK(router_.connected(), "LinkProbe::measure_links() without a transport");
  {
    const std::lock_guard lock(mutex_);
    if (failure_) throw *failure_;
  }
  ++phases_;
  // Every node has started its transport before any ping: a pong is sent from the delivery
  // thread, and a transport may refuse sends until its own start() returned.
  // Gate tags: phases_ in the high bits, the gate's index in this call in the low ones.
  const auto tag = [this](std::uint64_t index) { return (phases_ << 20) | index; };
  gate(tag(0), "the start of the probe");
  const auto start = Clock::now();
  const auto budget_end = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options_.budget_s));
  const auto overrun_end =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(kOverrunFactor * options_.budget_s));
  // alpha: ping-pong, one peer at a time, starting at the next rank (so the load spreads).
  for (std::size_t r = 1; r < n; ++r) {
    const std::size_t peer = (me + r) % n;
    row.alpha[peer] = report_[peer].alpha = ping_peer(peer);
  }
  // No node starts its bulk transfers before every node has finished its pings.
  gate(tag(1), "the end of the pings");
  // One buffer, shared by every message (the transport keeps it alive until written).
  auto buffer =
      std::make_shared<std::vector<std::byte>>(std::min(options_.max_bulk_bytes, kMaxChunkBytes));
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
  // The transport's CPU time per byte: the process's CPU time over the bulk rounds (the gates and
  // acks are a few hundred bytes against the megabytes), over the bytes sent and received.
  const std::optional<double> cpu_start = tasks::process_cpu_seconds();
  const std::uint64_t bytes_start = bulk_bytes_sent_ + bulk_bytes_received();
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
    gate(tag(2 + i), "the end of a bulk round");
  }
  const std::uint64_t bulk_bytes = bulk_bytes_sent_ + bulk_bytes_received() - bytes_start;
  const std::optional<double> cpu_end = tasks::process_cpu_seconds();
  if (bulk_bytes > 0 && cpu_start && cpu_end)
    transport_cpu_seconds_per_byte_ = (*cpu_end - *cpu_start) / static_cast<double>(bulk_bytes);
  // A burst takes 2 alpha + (m - 1) o + bytes / B (first message out, ack back); the median over
  // the bursts, as alpha is a median: one burst can lose the cores to a neighbour.
  for (double& elapsed : bursts) {
    const double rest =
        elapsed - 2 * row.alpha[next] - static_cast<double>(burst_bytes) / row.bandwidth[next];
    elapsed = std::max(0.0, rest / static_cast<double>(kBurstMessages - 1));
  }
  row.message_seconds = tasks::median(bursts);
  took_seconds_ = seconds(Clock::now() - start);
  return row;
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
    wait(
        lock, options_.timeout_s, [this] { return !ping_waiting_; }, [peer] { return peer; },
        "a ping");
    rtts.push_back(seconds(pong_at_ - sent));
  }
  return tasks::median(rtts) / 2;
}

void LinkProbe::end_round(std::size_t round, double expected_s) {
  const std::size_t n = router_.nodes();
  const std::size_t to = (router_.rank() + round) % n;
  const std::size_t from = (router_.rank() + n - round) % n;
  send(to, Kind::kBulkDone, 0, round);
  std::unique_lock lock(mutex_);
  const std::uint64_t awaited = ++incoming_[from].awaited;
  wait(
      lock, expected_s + options_.timeout_s, [&] { return incoming_[from].done >= awaited; },
      [&] { return from; }, "the end of its bulk transfers");
}

std::string LinkProbe::silent_text(std::size_t rank, double bound_s,
                                   const std::string& what) const {
  std::ostringstream message;
  message << "did not answer the link probe (" << what << ") within " << std::setprecision(3)
          << bound_s << " s" << measured_text(rank);
  return message.str();
}

void LinkProbe::gate(std::uint64_t tag, const char* what) {
  phase_gate_.arrive_and_wait(tag, options_.timeout_s, [&](std::size_t rank) {
    return silent_text(rank, options_.timeout_s, what);
  });
}

std::vector<NodeProfile> LinkProbe::exchange(const NodeProfile& local) {
  const std::size_t n = router_.nodes();
  const std::string why = profile_problem(local, n);
  GRADMESH_CHECK(why.empty(), "LinkProbe::exchange(): " + why);
  if (n == 1) return {local};
  GRADMESH_CHECK(router_.connected(), "LinkProbe::exchange() without a transport");
  const std::uint64_t round = exchanges_++;
  profiles_.start(round, encode_profile(local));
  const std::vector<net::Payload> payloads = profiles_.wait(
      round, options_.timeout_s,
      [&](std::size_t rank) { return silent_text(rank, options_.timeout_s, "its profile"); });
  std::vector<NodeProfile> all(n);
  for (std::size_t peer = 0; peer < n; ++peer) {
    if (peer == router_.rank()) {
      all[peer] = local;
      continue;
    }
    std::string problem;  // on_profile() let only well-formed profiles in
    all[peer] = decode_profile(payloads[peer].bytes(), n, problem).value();
  }
  return all;
}

void LinkProbe::barrier(std::uint64_t tag) {
  if (router_.nodes() == 1) return;
  GRADMESH_CHECK(router_.connected(), "LinkProbe::barrier() without a transport");
  barrier_.arrive_and_wait(tag, options_.timeout_s, [&](std::size_t rank) {
    return silent_text(rank, options_.timeout_s, "a barrier");
  });
}

}  // namespace gradmesh::sync
