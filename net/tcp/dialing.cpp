// TcpTransport dialing: each lower rank's addresses tried in turn (RFC 8305's staggered
// attempts), retried with back-off until connected or the connect timeout; the winning
// connection starts the handshake.
#include "net/tcp/mesh_impl.h"

namespace gradmesh::net {

using namespace tcp;

void TcpTransport::Impl::listen_on_own_addresses() {
  const Peer& self = peers_[options_.rank];
  std::string failed;  // "addr: why; ..." of the addresses not listened on
  bool fatal = false;  // one failed for a reason other than "not an address of this host"
  std::size_t listening = 0;
  for (const auto& address : self.addresses) {
    auto& listener = listeners_.emplace_back(std::make_unique<uv_tcp_t>());
    uv_tcp_init(&loop_, listener.get());
    listener->data = this;
    // IPV6ONLY: a v6 wildcard must not take the v4 port that another address of the list binds.
    const unsigned flags = address.socket_address.ss_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0;
    int rc = uv_tcp_bind(listener.get(), reinterpret_cast<const sockaddr*>(&address.socket_address),
                         flags);
    if (rc == 0)  // libuv reports EADDRINUSE here, not at the bind
      rc = uv_listen(reinterpret_cast<uv_stream_t*>(listener.get()), 128, &Impl::on_new_connection);
    if (rc == 0) {
      ++listening;
      continue;
    }
    failed += (failed.empty() ? "" : "; ") + address.text + ": " + uv_error_text(rc);
    fatal = fatal || (rc != UV_EADDRNOTAVAIL && rc != UV_EAFNOSUPPORT);
  }
  if (fatal || listening == 0)
    throw PeerError(options_.rank, self.address, "cannot listen on " + failed);
  if (!failed.empty())  // e.g. a host name whose ::1 exists in /etc/hosts but not on this host
    spdlog::warn("net rank {}: not listening on every address of {}: {}", options_.rank,
                 self.address, failed);
}

void TcpTransport::Impl::dial(std::size_t rank) noexcept {
  if (stopping_) return;
  peers_[rank].next_address = 0;
  try_next_address(rank);
}

void TcpTransport::Impl::try_next_address(std::size_t rank) noexcept {
  Peer& peer = peers_[rank];
  while (!stopping_ && peer.next_address < peer.addresses.size()) {
    const std::size_t index = peer.next_address++;
    Connection* connection =
        Connection::make(&loop_, *this, Connection::Role::kDialer, rank, limits(true));
    connection->dial_address = index;
    const int rc = connection->connect(
        reinterpret_cast<const sockaddr*>(&peer.addresses[index].socket_address));
    if (rc == 0) {
      peer.attempts.push_back(connection);
      if (peer.next_address < peer.addresses.size())
        uv_timer_start(&peer.attempt_timer, &Impl::on_attempt_delay, kAttemptDelayMs, 0);
      return;
    }
    note_dial_error(rank, index, uv_error_text(rc));
    close_connection(*connection);
  }
  if (!stopping_ && peer.attempts.empty()) schedule_retry(rank);
}

void TcpTransport::Impl::on_attempt_delay(uv_timer_t* timer) noexcept {
  auto* self = static_cast<Impl*>(timer->data);
  for (std::size_t r = 0; r < self->peers_.size(); ++r)
    if (self->dials(r) && &self->peers_[r].attempt_timer == timer) self->try_next_address(r);
}

void TcpTransport::Impl::note_dial_error(std::size_t rank, std::size_t address,
                                         const std::string& why) noexcept {
  spdlog::debug("net rank {}: cannot connect to rank {} at {}: {}", options_.rank, rank,
                peers_[rank].addresses[address].text, why);
  const std::lock_guard lock(mutex_);
  peers_[rank].dial_errors[address] = why;
}

std::string TcpTransport::Impl::dial_errors_locked(std::size_t rank) const {
  const Peer& peer = peers_[rank];
  std::string text;
  for (std::size_t i = 0; i < peer.dial_errors.size(); ++i) {
    if (peer.dial_errors[i].empty()) continue;
    text += (text.empty() ? "" : "; ") + peer.addresses[i].text + ": " + peer.dial_errors[i];
  }
  return text;
}

void TcpTransport::Impl::schedule_retry(std::size_t rank) noexcept {
  if (stopping_) return;
  Peer& peer = peers_[rank];
  uv_timer_start(&peer.retry_timer, &Impl::on_retry, peer.backoff_ms, 0);
  peer.backoff_ms = std::min(peer.backoff_ms * 2, kMaxBackoffMs);
}

void TcpTransport::Impl::on_retry(uv_timer_t* timer) noexcept {
  auto* self = static_cast<Impl*>(timer->data);
  for (std::size_t r = 0; r < self->peers_.size(); ++r)
    if (self->dials(r) && &self->peers_[r].retry_timer == timer) self->dial(r);
}

void TcpTransport::Impl::on_connected(Connection& connection, int status) noexcept {
  const std::size_t rank = connection.peer_rank();
  Peer& peer = peers_[rank];
  std::erase(peer.attempts, &connection);
  if (status != 0) {
    note_dial_error(rank, connection.dial_address, uv_error_text(status));
    close_connection(connection);
    if (peer.next_address < peer.addresses.size()) {  // RFC 8305 sec. 5: the next one at once
      uv_timer_stop(&peer.attempt_timer);
      try_next_address(rank);
    } else if (peer.attempts.empty()) {
      schedule_retry(rank);
    }
    return;
  }
  // This address won the race: the others go.
  uv_timer_stop(&peer.attempt_timer);
  for (Connection* other : peer.attempts) close_connection(*other);
  peer.attempts.clear();
  peer.next_address = peer.addresses.size();
  peer.connection = &connection;
  if (connection.start_reading() != 0) {
    close_connection(connection);
    schedule_retry(rank);
    return;
  }
  send_challenge(connection);
}

}  // namespace gradmesh::net
