#include "net/tcp/liveness.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "net/tcp/text.h"

namespace gradmesh::net::tcp {

using detail::Connection;

Liveness::Liveness(LivenessOwner& owner, std::vector<PeerLink>& peers, std::size_t rank,
                   double peer_timeout_s, std::size_t control_lane, CounterBook& counters)
    : owner_(owner),
      peers_(peers),
      rank_(rank),
      peer_timeout_s_(peer_timeout_s),
      control_lane_(control_lane),
      counters_(counters) {}

void Liveness::open(uv_loop_t* loop) {
  loop_ = loop;
  uv_timer_init(loop_, &timer_);
  timer_.data = this;
  open_ = true;
  if (peer_timeout_s_ > 0.0) {
    const auto every =
        std::max<std::uint64_t>(1, static_cast<std::uint64_t>(peer_timeout_s_ * 1000.0 / 4.0));
    uv_timer_start(&timer_, &Liveness::on_timer, every, every);
  }
}

void Liveness::close() noexcept {
  auto* handle = reinterpret_cast<uv_handle_t*>(&timer_);
  if (open_ && !uv_is_closing(handle)) uv_close(handle, nullptr);
}

void Liveness::on_timer(uv_timer_t* timer) noexcept { static_cast<Liveness*>(timer->data)->tick(); }

void Liveness::tick() noexcept {
  if (owner_.quiescing()) return;  // shutdown has its own timeout
  const std::uint64_t at = now();
  const std::uint64_t every_ms = std::max<std::uint64_t>(1, timeout_ms() / 4);
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    Connection* connection = peers_[r].connection();
    if (r == rank_ || connection == nullptr || !connection->established || connection->closing()) {
      continue;
    }
    // A peer that said Goodbye is shutting down cleanly and stops its heartbeats (as this node
    // does once it shuts down: shutdown() has its own timeout).
    const std::uint64_t direct_ms = at - std::min(at, connection->last_heard_ms);
    if (!connection->goodbye_received && check_silence(r, at, direct_ms)) continue;
    if (at - std::min(at, connection->last_written_ms) >= every_ms) {
      try {
        owner_.queue_control(*connection, encode_heartbeat(control_lane_));
        connection->last_written_ms = at;  // queued: the next one a period later at the earliest
      } catch (...) {
        spdlog::error("net rank {}: cannot queue a heartbeat to rank {}", rank_, r);
      }
    }
  }
  owner_.pump_sends();
}

void Liveness::peer_failed(std::size_t rank) noexcept {
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    if (peers_[r].liveness().peer_failed(rank) == LivenessQuery::Answer::kSettled) settle(r);
  }
}

void Liveness::settle(std::size_t rank) noexcept {
  const Connection* silent = peers_[rank].connection();
  if (silent == nullptr || !silent->established || silent->closing()) return;
  const std::uint64_t at = now();
  // Every answer is in and none heard it: failed now.
  fail_silent(rank, at - std::min(at, silent->last_heard_ms),
              ": hung, stopped or cut off; no other peer hears it either");
}

bool Liveness::check_silence(std::size_t rank, std::uint64_t now,
                             std::uint64_t direct_ms) noexcept {
  PeerLink& peer = peers_[rank];
  const std::uint64_t timeout = timeout_ms();
  if (direct_ms > kMaxVouchedTimeouts * timeout) {
    const std::string bound = std::to_string(kMaxVouchedTimeouts) + " x net.peer_timeout";
    fail_silent(
        rank, direct_ms,
        peer.liveness().vouched()
            ? ", though other peers heard from it: past " + bound +
                  " its link to this node is taken for broken"
            : ": hung, stopped or cut off; the other peers' answers did not come within " + bound);
    return true;
  }
  const std::uint64_t silent_ms = std::min(direct_ms, peer.liveness().silent_by_reports_ms(now));
  if (silent_ms <= timeout) {
    peer.liveness().close();  // heard (or vouched for) again: a query still out is moot
    return false;
  }
  if (!peer.liveness().open()) {
    if (query(rank, now)) return false;
    fail_silent(rank, direct_ms, ": hung, stopped or cut off");
    return true;
  }
  // The answers are still coming: on a slow link they wait behind bulk bytes too (seen: over
  // 8 s at 1 Mbit/s). A peer that fails meanwhile counts as an answer (peer_failed).
  return false;
}

void Liveness::fail_silent(std::size_t rank, std::uint64_t direct_ms,
                           const std::string& why) noexcept {
  peers_[rank].liveness().close();
  owner_.fail_silent_peer(
      rank, "sent nothing for " + seconds_text(static_cast<double>(direct_ms) / 1e3) +
                " s (net.peer_timeout = " + seconds_text(peer_timeout_s_) + " s)" + why);
}

bool Liveness::query(std::size_t rank, std::uint64_t now) noexcept {
  const std::uint64_t timeout = timeout_ms();
  std::size_t asked = 0;
  std::vector<bool> asking(peers_.size(), false);
  for (std::size_t q = 0; q < peers_.size(); ++q) {
    Connection* other = peers_[q].connection();
    if (q == rank || q == rank_ || other == nullptr || !other->established || other->closing() ||
        other->goodbye_received || now - std::min(now, other->last_heard_ms) > timeout) {
      continue;  // only a peer this node hears can answer in time
    }
    try {
      owner_.queue_control(*other, encode_liveness_query(rank, control_lane_));
      asking[q] = true;
      ++asked;
    } catch (...) {
      spdlog::error("net rank {}: cannot queue a liveness query to rank {}", rank_, q);
    }
  }
  if (asked == 0) return false;
  PeerLink& peer = peers_[rank];
  peer.liveness().start(now, std::move(asking));
  spdlog::info(
      "net rank {}: peer rank {} ({}) has sent nothing for {} s (net.peer_timeout = {} "
      "s); asking the {} other peer(s) it hears whether they hear it",
      rank_, rank, peer.address(),
      seconds_text(static_cast<double>(now - std::min(now, peer.connection()->last_heard_ms)) /
                   1e3),
      seconds_text(peer_timeout_s_), asked);
  return true;
}

bool Liveness::accept_frame(Connection& connection, const char* kind, std::size_t about,
                            bool about_allowed, std::size_t wire_bytes) noexcept {
  const std::size_t from = connection.peer_rank();
  if (about >= peers_.size() || !about_allowed) {
    owner_.reject_control(connection,
                          std::string(kind) + " about rank " + std::to_string(about) +
                              " from rank " + std::to_string(from) + " (" +
                              std::to_string(peers_.size()) + " ranks)",
                          wire_bytes);
    return false;
  }
  counters_.add_received(from, control_lane_, wire_bytes, 1);
  return true;
}

void Liveness::on_query(Connection& connection, const schema::LivenessQuery& query,
                        std::size_t wire_bytes) noexcept {
  const std::size_t from = connection.peer_rank();
  const std::size_t about = query.rank();
  if (!accept_frame(connection, "LivenessQuery", about, about != from, wire_bytes)) return;
  std::uint32_t silent_ms = kNotHeardMs;
  const std::uint64_t at = now();
  if (about == rank_) {
    silent_ms = 0;  // this node hears itself
  } else if (const Connection* c = peers_[about].connection();
             c != nullptr && c->established && !c->closing()) {
    silent_ms = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(at - std::min(at, c->last_heard_ms), kNotHeardMs - 1));
  }
  try {
    owner_.queue_control(connection, encode_liveness_report(about, silent_ms, control_lane_));
  } catch (...) {
    spdlog::error("net rank {}: cannot queue a liveness report to rank {}", rank_, from);
  }
  owner_.pump_sends();
}

void Liveness::on_report(Connection& connection, const schema::LivenessReport& report,
                         std::size_t wire_bytes) noexcept {
  const std::size_t from = connection.peer_rank();
  const std::size_t about = report.rank();
  if (!accept_frame(connection, "LivenessReport", about, about != from && about != rank_,
                    wire_bytes)) {
    return;
  }
  const LivenessQuery::Answer answer =
      peers_[about].liveness().report(from, report.silent_ms(), now(), timeout_ms());
  if (answer == LivenessQuery::Answer::kVouched) {
    spdlog::info(
        "net rank {}: rank {} heard peer rank {} {} s ago: its link to this node is slow, "
        "not the peer failed",
        rank_, from, about, seconds_text(static_cast<double>(report.silent_ms()) / 1e3));
  } else if (answer == LivenessQuery::Answer::kSettled) {
    settle(about);
  }
}

void Liveness::on_notice(Connection& connection, const schema::ConnectionNotice& notice,
                         std::size_t wire_bytes) noexcept {
  const std::size_t from = connection.peer_rank();
  const std::size_t about = notice.rank();
  // A notice about this node could only come over the connection being closed: none is sent.
  if (!accept_frame(connection, "ConnectionNotice", about, about != from && about != rank_,
                    wire_bytes)) {
    return;
  }
  try {
    const std::string reason = notice.reason() != nullptr ? notice.reason()->str() : "?";
    spdlog::warn("net rank {}: rank {} ({}) closes its connection to rank {} ({}): {}", rank_, from,
                 peers_[from].address(), about, peers_[about].address(), reason);
    peers_[about].set_notice("rank " + std::to_string(from) + " (" + peers_[from].address() +
                             ") closed its connection to it first: " + reason);
  } catch (...) {  // out of memory: the notice is lost, the failure stands on its own
  }
}

void Liveness::tell_peers_why(std::size_t rank, const std::string& why) noexcept {
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    if (r == rank_ || r == rank) continue;
    Connection* connection = peers_[r].connection();
    if (connection == nullptr || !connection->established || connection->closing()) continue;
    try {
      owner_.queue_control(*connection, encode_connection_notice(rank, why, control_lane_));
    } catch (...) {
      spdlog::error("net rank {}: cannot queue a connection notice to rank {}", rank_, r);
    }
  }
  owner_.pump_sends();
}

}  // namespace gradmesh::net::tcp
