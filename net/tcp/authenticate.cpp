// TcpTransport authentication: the Challenges and the Proof before the Hello (net/tcp/auth.h).
#include "net/tcp/mesh_impl.h"

namespace gradmesh::net {

using namespace tcp;

namespace {

std::span<const std::uint8_t> mac_bytes(const std::optional<auth::Mac>& mac) noexcept {
  return mac ? std::span<const std::uint8_t>(*mac) : std::span<const std::uint8_t>();
}

std::string wrong_secret(std::size_t rank) {
  return "rank " + std::to_string(rank) +
         " failed to prove the job secret (the nodes' secrets differ)";
}

}  // namespace

auth::Transcript TcpTransport::Impl::transcript(const Connection& connection, bool ours,
                                                std::size_t peer_rank) const noexcept {
  const bool dialer = (connection.role() == Connection::Role::kDialer) == ours;
  const auto side = dialer ? auth::Side::kDialer : auth::Side::kAcceptor;
  if (ours)
    return {
        side,     &connection.our_nonce, &connection.their_nonce, options_.job_name, options_.rank,
        peer_rank};
  return {
      side,         &connection.their_nonce, &connection.our_nonce, options_.job_name, peer_rank,
      options_.rank};
}

// ---------------------------------------------------------------- dialer

void TcpTransport::Impl::send_challenge(Connection& connection) noexcept {
  const std::size_t rank = connection.peer_rank();
  connection.our_nonce = auth::make_nonce();
  try {
    queue_frame(connection,
                auth::encode_challenge(options_.rank, connection.our_nonce, key_.has_value(), {},
                                       control_lane_, options_.rejoin, encrypts()));
  } catch (const std::exception& e) {
    fail_start(PeerError(rank, peers_[rank].address(),
                         std::string("cannot encode Challenge: ") + e.what()));
    return;
  }
  pump();
}

void TcpTransport::Impl::handle_acceptor_challenge(Connection& connection,
                                                   const schema::Header& header,
                                                   std::size_t wire) noexcept {
  const std::size_t rank = connection.peer_rank();
  if (header.body_type() == schema::Body::Refuse) {
    handle_dialer_reply(connection, header, wire);
    return;
  }
  counters_.add_received(rank, control_lane_, wire, 1);
  std::string why;
  std::optional<auth::ChallengeFields> theirs;
  if (header.body_type() != schema::Body::Challenge) {
    why = std::string("expected Challenge or Refuse, got ") + body_name(header.body_type());
  } else {
    theirs = auth::decode_challenge(*header.body_as_Challenge(), why);
    if (theirs)
      why = check_acceptor_challenge(*theirs, options_.rank, rank, key_.has_value(), encrypts());
  }
  if (why.empty()) {
    connection.their_nonce = theirs->nonce;
    if (key_ && !auth::verify(*key_, transcript(connection, false, rank), theirs->mac))
      why = wrong_secret(rank);
  }
  if (!why.empty()) {  // the acceptor reads why before we hang up
    refuse(connection, rank, why, /*fails_start=*/true);
    return;
  }
  std::optional<auth::Mac> mac;
  if (key_) mac = auth::prove(*key_, transcript(connection, true, rank));
  connection.step = Connection::Step::kHello;
  connection.set_limits(limits(true, /*authenticated=*/true));  // a HelloAck, or a long Refuse
  // Sealed from here: what the acceptor sends after its Challenge, what we send after our Proof.
  std::optional<auth::SessionKeys> keys;
  if (encrypts()) {
    keys = auth::derive_session_keys(*key_, transcript(connection, true, rank));
    connection.start_opening(keys->receive);
  }
  try {
    queue_frame(connection, auth::encode_proof(mac_bytes(mac), control_lane_));
    if (keys) connection.start_sealing(keys->send);
    queue_frame(connection, encode_hello(our_hello(), control_lane_));
  } catch (const std::exception& e) {
    fail_start(PeerError(rank, peers_[rank].address(),
                         std::string("cannot encode Proof and Hello: ") + e.what()));
    return;
  }
  pump();
}

// ---------------------------------------------------------------- acceptor

void TcpTransport::Impl::handle_challenge(Connection& connection, const schema::Header& header,
                                          std::size_t wire) noexcept {
  if (header.body_type() == schema::Body::Hello) {  // a peer older than protocol version 4
    const schema::Hello& hello = *header.body_as_Hello();
    counters_.add_received(CounterBook::kUnknownPeer, control_lane_, wire, 1);
    refuse(connection, hello.rank(),
           "expected a Challenge (protocol version " + std::to_string(kProtocolVersion) +
               "), got a Hello of protocol version " + std::to_string(hello.protocol_version()),
           false);
    return;
  }
  if (header.body_type() != schema::Body::Challenge) {
    reject_inbound(connection,
                   std::string("expected Challenge, got ") + body_name(header.body_type()));
    return;
  }
  std::string why;
  const auto theirs = auth::decode_challenge(*header.body_as_Challenge(), why);
  if (theirs)
    why = check_challenge(*theirs, options_.rank, peers_.size(), key_.has_value(), encrypts());
  // A rejoin claim is checked here; a plain claim of a failed rank only at the Hello, after its
  // view: a survivor of a rollback, renumbered in a newer view, may claim a rank that failed in
  // this node's older view, and must be told to dial again, not refused.
  bool retry = false;
  if (why.empty() && theirs->rejoin) why = rejoin_refusal(theirs->rank, true, retry);
  if (why.empty() && peers_[theirs->rank].connection() != nullptr)
    why = "rank " + std::to_string(theirs->rank) + " is already connected";
  if (!why.empty()) {
    counters_.add_received(CounterBook::kUnknownPeer, control_lane_, wire, 1);
    refuse(connection, theirs ? theirs->rank : kNoRank, why, false, retry);
    return;
  }
  const std::size_t rank = theirs->rank;
  counters_.add_received(rank, control_lane_, wire, 1);
  connection.set_peer_rank(rank);  // a claim until its Proof is checked
  connection.their_nonce = theirs->nonce;
  connection.our_nonce = auth::make_nonce();
  connection.step = Connection::Step::kProof;
  std::optional<auth::Mac> mac;
  if (key_) mac = auth::prove(*key_, transcript(connection, true, rank));
  try {
    queue_frame(connection,
                auth::encode_challenge(options_.rank, connection.our_nonce, key_.has_value(),
                                       mac_bytes(mac), control_lane_, false, encrypts()));
  } catch (...) {
    reject_inbound(connection, "cannot encode Challenge");
    return;
  }
  // Sealed from here: what we send after our Challenge (the dialer opens it once it checked our
  // proof); what the dialer sends after its Proof is opened once we checked that (handle_proof).
  if (encrypts())
    connection.start_sealing(
        auth::derive_session_keys(*key_, transcript(connection, true, rank)).send);
  pump();
}

void TcpTransport::Impl::handle_proof(Connection& connection, const schema::Header& header,
                                      std::size_t wire) noexcept {
  const std::size_t rank = connection.peer_rank();
  if (header.body_type() == schema::Body::Refuse) {
    refused_by_dialer(connection, header, wire);
    return;
  }
  if (header.body_type() != schema::Body::Proof) {
    reject_inbound(connection, std::string("expected Proof, got ") + body_name(header.body_type()));
    return;
  }
  const auto* mac = header.body_as_Proof()->mac();
  const std::span<const std::uint8_t> bytes =
      mac != nullptr ? std::span<const std::uint8_t>(mac->data(), mac->size())
                     : std::span<const std::uint8_t>();
  if (key_ && !auth::verify(*key_, transcript(connection, false, rank), bytes)) {
    counters_.add_received(CounterBook::kUnknownPeer, control_lane_, wire, 1);
    refuse(connection, rank, wrong_secret(rank), false);
    return;
  }
  counters_.add_received(rank, control_lane_, wire, 1);
  connection.step = Connection::Step::kHello;
  connection.set_limits(limits(true, /*authenticated=*/true));  // its Hello: a long peer list
  if (encrypts())  // its Hello and every frame after it come sealed
    connection.start_opening(
        auth::derive_session_keys(*key_, transcript(connection, true, rank)).receive);
}

void TcpTransport::Impl::refused_by_dialer(Connection& connection, const schema::Header& header,
                                           std::size_t wire) noexcept {
  const std::size_t rank = connection.peer_rank();
  const auto* reason = header.body_as_Refuse()->reason();
  const std::string why = "rank " + std::to_string(rank) + " refused our Challenge: " +
                          (reason != nullptr ? reason->str() : std::string("no reason given"));
  counters_.add_received(CounterBook::kUnknownPeer, control_lane_, wire, 1);
  log_rejection(spdlog::level::err, "connection from " + connection.remote_address() + ": " + why);
  {
    const std::lock_guard lock(mutex_);
    peers_[rank].set_last_refusal_locked(why);
  }
  close_connection(connection);
}

}  // namespace gradmesh::net
