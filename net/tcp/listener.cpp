// Accepting (net/tcp/listener.h): the listening sockets, the caps on handshakes in progress and
// their deadline.
#include "net/tcp/listener.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/error.h"
#include "net/tcp/text.h"

namespace gradmesh::net::tcp {

using detail::Connection;

Listener::Listener(ListenerOwner& owner, std::size_t self_rank, std::size_t peers,
                   double handshake_timeout_s)
    : owner_(owner),
      self_rank_(self_rank),
      peers_(peers),
      handshake_timeout_s_(handshake_timeout_s) {}

void Listener::open(uv_loop_t* loop) noexcept {
  loop_ = loop;
  uv_timer_init(loop_, &handshake_timer_);
  handshake_timer_.data = this;
  const auto every =
      std::max<std::uint64_t>(10, static_cast<std::uint64_t>(handshake_timeout_s_ * 1000.0 / 4.0));
  uv_timer_start(&handshake_timer_, &Listener::on_handshake_deadline, every, every);
}

void Listener::listen(const std::vector<ResolvedAddress>& addresses, const std::string& address) {
  std::string failed;  // "addr: why; ..." of the addresses not listened on
  bool fatal = false;  // one failed for a reason other than "not an address of this host"
  std::size_t listening = 0;
  for (const auto& own : addresses) {
    auto& listener = listeners_.emplace_back(std::make_unique<uv_tcp_t>());
    uv_tcp_init(loop_, listener.get());
    listener->data = this;
    // IPV6ONLY: a v6 wildcard must not take the v4 port that another address of the list binds.
    const unsigned flags = own.socket_address.ss_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0;
    int rc =
        uv_tcp_bind(listener.get(), reinterpret_cast<const sockaddr*>(&own.socket_address), flags);
    if (rc == 0)  // libuv reports EADDRINUSE here, not at the bind
      rc = uv_listen(reinterpret_cast<uv_stream_t*>(listener.get()), 128,
                     &Listener::on_new_connection);
    if (rc == 0) {
      ++listening;
      continue;
    }
    failed += (failed.empty() ? "" : "; ") + own.text + ": " + uv_error_text(rc);
    fatal = fatal || (rc != UV_EADDRNOTAVAIL && rc != UV_EAFNOSUPPORT);
  }
  if (fatal || listening == 0) throw PeerError(self_rank_, address, "cannot listen on " + failed);
  if (!failed.empty())  // e.g. a host name whose ::1 exists in /etc/hosts but not on this host
    spdlog::warn("net rank {}: not listening on every address of {}: {}", self_rank_, address,
                 failed);
}

void Listener::forget(Connection& connection) noexcept {
  std::erase(pending_inbound_, &connection);
}

void Listener::close_handles() noexcept {
  auto close = [](auto* handle) {
    auto* h = reinterpret_cast<uv_handle_t*>(handle);
    if (!uv_is_closing(h)) uv_close(h, nullptr);
  };
  for (auto& listener : listeners_) close(listener.get());
  if (loop_ != nullptr) close(&handshake_timer_);
}

void Listener::close_pending() noexcept {
  while (!pending_inbound_.empty()) owner_.close_connection(*pending_inbound_.back());
}

void Listener::on_new_connection(uv_stream_t* server, int status) noexcept {
  auto* self = static_cast<Listener*>(server->data);
  if (self->owner_.stopping()) return;
  if (status != 0) {
    spdlog::warn("net rank {}: accept failed: {}", self->self_rank_, uv_error_text(status));
    return;
  }
  Connection* connection = self->owner_.make_accept_connection();
  if (uv_accept(server, connection->stream()) != 0) {
    connection->close();
    return;
  }
  connection->accepted_ms = uv_now(self->loop_);
  connection->remote_ip = connection->remote_ip_address();
  // Bounded state for strangers: a connection past a cap on handshakes in progress is closed
  // before it is read (it must be accepted to leave the listen backlog).
  const std::size_t peers = self->peers_;
  const auto& pending = self->pending_inbound_;
  const std::size_t from_ip = static_cast<std::size_t>(
      std::count_if(pending.begin(), pending.end(),
                    [&](const Connection* c) { return c->remote_ip == connection->remote_ip; }));
  std::string why;
  if (pending.size() >= 2 * peers + kExtraPendingHandshakes)
    why = std::to_string(pending.size()) + " handshakes in progress already";
  else if (from_ip >= peers + kExtraPendingHandshakesPerAddress)
    why = std::to_string(from_ip) + " handshakes from " + connection->remote_ip +
          " in progress already";
  if (!why.empty()) {
    self->owner_.reject_inbound(*connection, why);
    return;
  }
  if (connection->start_reading() != 0) {
    connection->close();
    return;
  }
  self->pending_inbound_.push_back(connection);
}

void Listener::on_handshake_deadline(uv_timer_t* timer) noexcept {
  auto* self = static_cast<Listener*>(timer->data);
  if (self->owner_.stopping()) return;
  const std::uint64_t now = uv_now(self->loop_);
  const auto limit_ms = static_cast<std::uint64_t>(self->handshake_timeout_s_ * 1000.0);
  std::vector<Connection*> late;
  for (Connection* c : self->pending_inbound_)
    if (!c->closing() && now - std::min(now, c->accepted_ms) > limit_ms) late.push_back(c);
  for (Connection* c : late) {
    self->owner_.reject_inbound(*c, "handshake not finished within " +
                                        seconds_text(self->handshake_timeout_s_) +
                                        " s (net.handshake_timeout)");
  }
}

}  // namespace gradmesh::net::tcp
