// TcpTransport and its Dialers and Listener (net/tcp/dialer.h, net/tcp/listener.h): the
// connections they make, and the dial that won (its handshake starts here).
#include "net/tcp/mesh_impl.h"

namespace gradmesh::net {

using namespace tcp;

Connection* TcpTransport::Impl::make_dial_connection(std::size_t rank) noexcept {
  return Connection::make(&loop_, *this, Connection::Role::kDialer, rank, limits(true));
}

Connection* TcpTransport::Impl::make_accept_connection() noexcept {
  return Connection::make(&loop_, *this, Connection::Role::kAcceptor, kNoRank, limits(true));
}

void TcpTransport::Impl::on_connected(Connection& connection, int status) noexcept {
  const std::size_t rank = connection.peer_rank();
  PeerLink& peer = peers_[rank];
  Dialer& dialer = *peer.dialer();
  if (!dialer.connected(connection, status)) return;  // failed: the dialer went on
  peer.set_connection(&connection);
  if (connection.start_reading() != 0) {
    close_connection(connection);
    dialer.schedule_retry();
    return;
  }
  authenticator_.send_challenge(connection);
}

}  // namespace gradmesh::net
