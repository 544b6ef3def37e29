#include "net/tcp/authenticator.h"

#include <span>
#include <utility>

#include "net/tcp/handshake.h"
#include "net/tcp/text.h"

namespace gradmesh::net::tcp {

using detail::Connection;

namespace {

std::span<const std::uint8_t> mac_bytes(const std::optional<auth::Mac>& mac) noexcept {
  return mac ? std::span<const std::uint8_t>(*mac) : std::span<const std::uint8_t>();
}

std::string wrong_secret(std::size_t rank) {
  return "rank " + std::to_string(rank) +
         " failed to prove the job secret (the nodes' secrets differ)";
}

}  // namespace

Authenticator::Authenticator(AuthenticatorOwner& owner, std::string& secret, bool encrypt,
                             std::string job_name, std::size_t rank, bool rejoin,
                             std::size_t control_lane, std::vector<PeerLink>& peers,
                             CounterBook& counters)
    : owner_(owner),
      encrypt_(encrypt),
      job_name_(std::move(job_name)),
      rank_(rank),
      rejoin_(rejoin),
      control_lane_(control_lane),
      peers_(peers),
      counters_(counters) {
  if (!secret.empty()) {
    key_.emplace(secret);
    auth::wipe(secret);
  }
}

auth::Transcript Authenticator::transcript(const Connection& connection, bool ours,
                                           std::size_t peer_rank) const noexcept {
  const bool dialer = (connection.role() == Connection::Role::kDialer) == ours;
  const auto side = dialer ? auth::Side::kDialer : auth::Side::kAcceptor;
  if (ours)
    return {side, &connection.our_nonce, &connection.their_nonce, job_name_, rank_, peer_rank};
  return {side, &connection.their_nonce, &connection.our_nonce, job_name_, peer_rank, rank_};
}

// ---------------------------------------------------------------- dialer

void Authenticator::send_challenge(Connection& connection) noexcept {
  const std::size_t rank = connection.peer_rank();
  connection.our_nonce = auth::make_nonce();
  try {
    owner_.queue_control(connection,
                         auth::encode_challenge(rank_, connection.our_nonce, key_.has_value(), {},
                                                control_lane_, rejoin_, encrypts()));
  } catch (const std::exception& e) {
    owner_.fail_start(PeerError(rank, peers_[rank].address(),
                                std::string("cannot encode Challenge: ") + e.what()));
    return;
  }
  owner_.pump_sends();
}

void Authenticator::on_acceptor_challenge(Connection& connection, const schema::Header& header,
                                          std::size_t wire) noexcept {
  const std::size_t rank = connection.peer_rank();
  if (header.body_type() == schema::Body::Refuse) {
    owner_.handle_dialer_reply(connection, header, wire);
    return;
  }
  counters_.add_received(rank, control_lane_, wire, 1);
  std::string why;
  std::optional<auth::ChallengeFields> theirs;
  if (header.body_type() != schema::Body::Challenge) {
    why = std::string("expected Challenge or Refuse, got ") + body_name(header.body_type());
  } else {
    theirs = auth::decode_challenge(*header.body_as_Challenge(), why);
    if (theirs) why = check_acceptor_challenge(*theirs, rank_, rank, key_.has_value(), encrypts());
  }
  if (why.empty()) {
    connection.their_nonce = theirs->nonce;
    if (key_ && !auth::verify(*key_, transcript(connection, false, rank), theirs->mac))
      why = wrong_secret(rank);
  }
  if (!why.empty()) {  // the acceptor reads why before we hang up
    owner_.refuse(connection, rank, why, /*fails_start=*/true, /*retry=*/false);
    return;
  }
  std::optional<auth::Mac> mac;
  if (key_) mac = auth::prove(*key_, transcript(connection, true, rank));
  connection.step = Connection::Step::kHello;
  connection.set_limits(owner_.authenticated_limits());  // a HelloAck, or a long Refuse
  // Sealed from here: what the acceptor sends after its Challenge, what we send after our Proof.
  std::optional<auth::SessionKeys> keys;
  if (encrypts()) {
    keys = auth::derive_session_keys(*key_, transcript(connection, true, rank));
    connection.start_opening(keys->receive);
  }
  try {
    owner_.queue_control(connection, auth::encode_proof(mac_bytes(mac), control_lane_));
    if (keys) connection.start_sealing(keys->send);
    owner_.queue_control(connection, owner_.encode_our_hello());
  } catch (const std::exception& e) {
    owner_.fail_start(PeerError(rank, peers_[rank].address(),
                                std::string("cannot encode Proof and Hello: ") + e.what()));
    return;
  }
  owner_.pump_sends();
}

// ---------------------------------------------------------------- acceptor

void Authenticator::on_challenge(Connection& connection, const schema::Header& header,
                                 std::size_t wire) noexcept {
  if (header.body_type() == schema::Body::Hello) {  // a peer older than protocol version 4
    const schema::Hello& hello = *header.body_as_Hello();
    counters_.add_received(CounterBook::kUnknownPeer, control_lane_, wire, 1);
    owner_.refuse(connection, hello.rank(),
                  "expected a Challenge (protocol version " + std::to_string(kProtocolVersion) +
                      "), got a Hello of protocol version " +
                      std::to_string(hello.protocol_version()),
                  false, false);
    return;
  }
  if (header.body_type() != schema::Body::Challenge) {
    owner_.reject_inbound(connection,
                          std::string("expected Challenge, got ") + body_name(header.body_type()));
    return;
  }
  std::string why;
  const auto theirs = auth::decode_challenge(*header.body_as_Challenge(), why);
  if (theirs) why = check_challenge(*theirs, rank_, peers_.size(), key_.has_value(), encrypts());
  // A rejoin claim is checked here; a plain claim of a failed rank only at the Hello, after its
  // view: a survivor of a rollback, renumbered in a newer view, may claim a rank that failed in
  // this node's older view, and must be told to dial again, not refused.
  bool retry = false;
  if (why.empty() && theirs->rejoin) why = owner_.rejoin_refusal(theirs->rank, true, retry);
  if (why.empty() && peers_[theirs->rank].connection() != nullptr)
    why = "rank " + std::to_string(theirs->rank) + " is already connected";
  if (!why.empty()) {
    counters_.add_received(CounterBook::kUnknownPeer, control_lane_, wire, 1);
    owner_.refuse(connection, theirs ? theirs->rank : kNoRank, why, false, retry);
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
    owner_.queue_control(connection,
                         auth::encode_challenge(rank_, connection.our_nonce, key_.has_value(),
                                                mac_bytes(mac), control_lane_, false, encrypts()));
  } catch (...) {
    owner_.reject_inbound(connection, "cannot encode Challenge");
    return;
  }
  // Sealed from here: what we send after our Challenge (the dialer opens it once it checked our
  // proof); what the dialer sends after its Proof is opened once we checked that (handle_proof).
  if (encrypts())
    connection.start_sealing(
        auth::derive_session_keys(*key_, transcript(connection, true, rank)).send);
  owner_.pump_sends();
}

void Authenticator::on_proof(Connection& connection, const schema::Header& header,
                             std::size_t wire) noexcept {
  const std::size_t rank = connection.peer_rank();
  if (header.body_type() == schema::Body::Refuse) {
    on_dialer_refusal(connection, header, wire);
    return;
  }
  if (header.body_type() != schema::Body::Proof) {
    owner_.reject_inbound(connection,
                          std::string("expected Proof, got ") + body_name(header.body_type()));
    return;
  }
  const auto* mac = header.body_as_Proof()->mac();
  const std::span<const std::uint8_t> bytes =
      mac != nullptr ? std::span<const std::uint8_t>(mac->data(), mac->size())
                     : std::span<const std::uint8_t>();
  if (key_ && !auth::verify(*key_, transcript(connection, false, rank), bytes)) {
    counters_.add_received(CounterBook::kUnknownPeer, control_lane_, wire, 1);
    owner_.refuse(connection, rank, wrong_secret(rank), false, false);
    return;
  }
  counters_.add_received(rank, control_lane_, wire, 1);
  connection.step = Connection::Step::kHello;
  connection.set_limits(owner_.authenticated_limits());  // its Hello: a long peer list
  if (encrypts())  // its Hello and every frame after it come sealed
    connection.start_opening(
        auth::derive_session_keys(*key_, transcript(connection, true, rank)).receive);
}

void Authenticator::on_dialer_refusal(Connection& connection, const schema::Header& header,
                                      std::size_t wire) noexcept {
  const std::size_t rank = connection.peer_rank();
  const auto* reason = header.body_as_Refuse()->reason();
  const std::string why = "rank " + std::to_string(rank) + " refused our Challenge: " +
                          (reason != nullptr ? reason->str() : std::string("no reason given"));
  counters_.add_received(CounterBook::kUnknownPeer, control_lane_, wire, 1);
  owner_.log_rejection(spdlog::level::err,
                       "connection from " + connection.remote_address() + ": " + why);
  owner_.set_last_refusal(rank, why);
  owner_.close_connection(connection);
}

}  // namespace gradmesh::net::tcp
