// TcpTransport receiving: frame dispatch, malformed frames, broken connections, writes done.
#include "net/tcp/mesh_impl.h"

namespace gradmesh::net {

using namespace tcp;

// ---------------------------------------------------------------- frames

void TcpTransport::Impl::on_bytes_read(Connection& connection, std::size_t bytes) noexcept {
  const std::uint64_t now = uv_now(&loop_);
  if (connection.established) {
    counters_.add_read_bytes(
        bytes, connection.peer_rank(),
        static_cast<double>(now - std::min(now, connection.last_heard_ms)) / 1e3);
  } else {
    counters_.add_read_bytes(bytes);
  }
  connection.last_heard_ms = now;
}

void TcpTransport::Impl::on_frame(Connection& connection, const schema::Header& header,
                                  Payload&& payload, std::size_t wire_bytes) noexcept {
  if (!connection.established) {
    const bool dialer = connection.role() == Connection::Role::kDialer;
    switch (connection.step) {
      case Connection::Step::kChallenge:
        if (dialer) {
          authenticator_.on_acceptor_challenge(connection, header, wire_bytes);
        } else {
          authenticator_.on_challenge(connection, header, wire_bytes);
        }
        return;
      case Connection::Step::kProof:
        authenticator_.on_proof(connection, header, wire_bytes);
        return;
      case Connection::Step::kHello:
        if (dialer) {
          handle_dialer_reply(connection, header, wire_bytes);
        } else if (header.body_type() == schema::Body::Hello) {
          handle_hello(connection, *header.body_as_Hello(), wire_bytes);
        } else {
          reject_inbound(connection,
                         std::string("expected Hello, got ") + body_name(header.body_type()));
        }
        return;
      case Connection::Step::kRefused:  // our Refuse is on its way; the peer's frames don't count
        counters_.add_received(CounterBook::kUnknownPeer, control_lane_, wire_bytes, 1);
        return;
    }
    return;
  }
  const std::size_t rank = connection.peer_rank();
  switch (header.body_type()) {
    case schema::Body::Data: {
      const schema::Data* data = header.body_as_Data();
      counters_.add_received(rank, data->lane(), wire_bytes, 1);
      if (!on_message_) return;
      try {
        on_message_(rank, Message{data->lane(), data->kind(), data->key(), data->round(),
                                  std::move(payload)});
      } catch (const std::exception& e) {
        counters_.add_malformed_frame();
        spdlog::error("net rank {}: message handler threw on a frame from rank {} ({}): {}",
                      options_.rank, rank, peers_[rank].address(), e.what());
      } catch (...) {
        counters_.add_malformed_frame();
        spdlog::error("net rank {}: message handler threw a non-exception on a frame from rank {}",
                      options_.rank, rank);
      }
      return;
    }
    case schema::Body::Heartbeat:  // last_heard_ms moved when its bytes were read
      counters_.add_received(rank, control_lane_, wire_bytes, 1);
      return;
    case schema::Body::LivenessQuery:  // counted there: a malformed one as such
      liveness_.on_query(connection, *header.body_as_LivenessQuery(), wire_bytes);
      return;
    case schema::Body::LivenessReport:
      liveness_.on_report(connection, *header.body_as_LivenessReport(), wire_bytes);
      return;
    case schema::Body::ConnectionNotice:
      liveness_.on_notice(connection, *header.body_as_ConnectionNotice(), wire_bytes);
      return;
    case schema::Body::Goodbye:
      counters_.add_received(rank, control_lane_, wire_bytes, 1);
      connection.goodbye_received = true;
      maybe_finish_peer(connection);
      return;
    case schema::Body::Abort: {
      counters_.add_received(rank, control_lane_, wire_bytes, 1);
      const schema::Abort* abort = header.body_as_Abort();
      const flatbuffers::String* reason = abort->reason();
      // The rank it names is checked: a bad one is the sender's own failure, not another's.
      const std::int64_t failed = abort->failed_rank();
      const bool names_other = failed >= 0 && static_cast<std::uint64_t>(failed) < peers_.size() &&
                               static_cast<std::size_t>(failed) != rank;
      fail_peer(rank, "aborted the job: " + (reason != nullptr ? reason->str() : std::string("?")),
                names_other ? std::optional<std::size_t>(static_cast<std::size_t>(failed))
                            : std::nullopt);
      return;
    }
    default:
      on_malformed(
          connection,
          std::string("unexpected ") + body_name(header.body_type()) + " after the handshake",
          wire_bytes);
      return;
  }
}

void TcpTransport::Impl::on_malformed(Connection& connection, const std::string& why,
                                      std::size_t wire_bytes) noexcept {
  if (!connection.established) {
    if (connection.role() == Connection::Role::kAcceptor) {
      reject_inbound(connection, why);
    } else {
      const std::size_t rank = connection.peer_rank();
      close_connection(connection);
      fail_start(PeerError(rank, peers_[rank].address(), "malformed handshake reply: " + why));
    }
    return;
  }
  const std::size_t rank = connection.peer_rank();
  counters_.add_malformed_frame();
  counters_.add_received(rank, CounterBook::kNoLane, wire_bytes, 0);
  spdlog::error("net rank {}: skipped a malformed frame of {} bytes from rank {} ({}): {}",
                options_.rank, wire_bytes, rank, peers_[rank].address(), why);
}

void TcpTransport::Impl::on_unverified(Connection& connection, const std::string& why) noexcept {
  counters_.add_unverified_frame();
  const std::size_t rank = connection.peer_rank();
  const std::string address = rank < peers_.size() ? peers_[rank].address() : "unknown";
  spdlog::error("net rank {}: closing the connection to rank {} ({}, from {}): {}", options_.rank,
                rank, address, connection.remote_address(), why);
  if (!connection.established) {
    on_broken(connection, 0, why);
    return;
  }
  liveness_.tell_peers_why(rank, why);
  fail_peer(rank, why);
}

void TcpTransport::Impl::on_broken(Connection& connection, int status,
                                   const std::string& why) noexcept {
  const std::size_t rank = connection.peer_rank();
  if (!connection.established) {
    if (!connection.refusal.empty()) {  // the peer read our Refuse and hung up before our write
      finish_refusal(connection);       // callback ran
    } else if (connection.step == Connection::Step::kRefused) {
      close_connection(connection);  // counted as rejected when we refused it
    } else if (connection.role() == Connection::Role::kAcceptor) {
      reject_inbound(connection, why);
    } else if (status != 0) {  // the acceptor went away mid-handshake: dial again
      close_connection(connection);
      peers_[rank].dialer()->schedule_retry();
    } else {
      close_connection(connection);
      fail_start(PeerError(rank, peers_[rank].address(), "handshake failed: " + why));
    }
    return;
  }
  if (connection.goodbye_received) {  // the peer said Goodbye: its close is no failure
    close_connection(connection);
    mark_done(rank);
    return;
  }
  if (status == 0) {
    counters_.add_malformed_frame();
    spdlog::error("net rank {}: closing the connection to rank {} ({}): {}", options_.rank, rank,
                  peers_[rank].address(), why);
  }
  fail_peer(rank, why);
}

void TcpTransport::Impl::on_written(Connection& connection, const OutgoingFrame& frame,
                                    std::size_t bytes, bool frame_done) noexcept {
  counters_.add_sent(connection.peer_rank(), frame.lane(), bytes, frame_done ? 1 : 0);
  connection.last_written_ms = uv_now(&loop_);
  if (!frame_done) return;
  if (frame.role() == FrameRole::kAbort) {
    {
      const std::lock_guard lock(mutex_);
      if (aborts_pending_ > 0) --aborts_pending_;
    }
    changed_.notify_all();
    return;
  }
  if (connection.closing()) return;  // counted above; no state change on a closing connection
  if (frame.role() == FrameRole::kGoodbye) {
    connection.goodbye_sent = true;
    maybe_finish_peer(connection);
  } else if (frame.role() == FrameRole::kRefuse) {
    finish_refusal(connection);
  }
}

void TcpTransport::Impl::finish_refusal(Connection& connection) noexcept {
  std::string refusal = std::move(connection.refusal);
  connection.refusal.clear();
  const std::size_t rank = connection.peer_rank();
  close_connection(connection);
  if (!refusal.empty()) fail_start(PeerError(rank, peers_[rank].address(), refusal));
}

}  // namespace gradmesh::net
