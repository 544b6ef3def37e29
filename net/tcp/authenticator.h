#pragma once
// Internal to net/tcp/: the job secret's challenge-response before the Hello, one owner for it
// (the key, the transcripts, the session keys of sealed frames; the wire steps in auth.h):
//
//   dialer D                                      acceptor A
//   Challenge{version, D, nonce_D, secret?}    ->
//                                              <-    Challenge{..., A, nonce_A, mac_A}
//   Proof{mac_D}, then Hello                   ->
//                                              <-    HelloAck or Refuse
//
// Each step checks what it received and moves the connection's step on; a failure is handed to
// the owner (refuse, fail start-up, reject), which holds the peers' shared state.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "net/counters.h"
#include "net/frame.h"
#include "net/tcp/auth.h"
#include "net/tcp/connection.h"
#include "net/tcp/peer_link.h"

namespace gradmesh::net::tcp {

/// What Authenticator asks of the mesh that holds it (TcpTransport::Impl). Loop thread; never
/// throws.
class AuthenticatorOwner {
 public:
  /// Queues a control frame on `connection` (sent at the next pump).
  virtual void queue_control(detail::Connection& connection,
                             std::unique_ptr<OutgoingFrame> frame) noexcept = 0;
  /// Writes what is queued, as the send cap allows.
  virtual void pump_sends() noexcept = 0;
  /// Sends a Refuse saying `why` and closes after it; with `fails_start`, start() fails naming
  /// `claimed_rank`; `retry`: the dialer should dial again.
  virtual void refuse(detail::Connection& connection, std::size_t claimed_rank,
                      const std::string& why, bool fails_start, bool retry) noexcept = 0;
  /// start() fails with `error`.
  virtual void fail_start(PeerError error) noexcept = 0;
  /// An inbound connection that broke the protocol: logged, counted, closed.
  virtual void reject_inbound(detail::Connection& connection, const std::string& why) noexcept = 0;
  /// The reply to a dialer's Proof and Hello (HelloAck, or a Refuse) arrived early, at the
  /// Challenge step: the owner's Hello step handles it.
  virtual void handle_dialer_reply(detail::Connection& connection, const schema::Header& header,
                                   std::size_t wire) noexcept = 0;
  /// Why a claim of `rank` (rejoining or not) cannot go on now, or ""; sets `retry`.
  [[nodiscard]] virtual std::string rejoin_refusal(std::size_t rank, bool rejoin,
                                                   bool& retry) noexcept = 0;
  /// A rejected connection: counted, logged at `level` (throttled).
  virtual void log_rejection(spdlog::level::level_enum level, const std::string& line) noexcept = 0;
  /// Keeps `why` as the last refusal of `rank` (named if start() times out), under the lock.
  virtual void set_last_refusal(std::size_t rank, const std::string& why) noexcept = 0;
  /// Takes `connection` off every list and closes it.
  virtual void close_connection(detail::Connection& connection) noexcept = 0;
  /// The reader's limits once the peer proved itself (handshake frames, authenticated).
  [[nodiscard]] virtual detail::ReadLimits authenticated_limits() const noexcept = 0;
  /// This node's Hello, encoded (throws what encoding throws).
  [[nodiscard]] virtual std::unique_ptr<OutgoingFrame> encode_our_hello() const = 0;

 protected:
  ~AuthenticatorOwner() = default;
};

/// This node's side of the challenge-response (net/tcp/auth.h) on each connection in its
/// handshake.
///
/// Threads: construct on any thread; every other call on the loop thread only. Never throws after
/// the constructor: a failure is refused or failed through the owner.
class Authenticator final {
 public:
  /// `secret`: the job secret (empty: none), wiped here; `encrypt`: seal the frames after the
  /// handshake when there is a secret (TransportOptions::encrypt); `job_name`, `rank`: what the
  /// proofs cover; `rejoin`: this node dials as a restarted one; `peers`: the mesh's links.
  Authenticator(AuthenticatorOwner& owner, std::string& secret, bool encrypt, std::string job_name,
                std::size_t rank, bool rejoin, std::size_t control_lane,
                std::vector<PeerLink>& peers, CounterBook& counters);

  /// Whether frames after the authentication are sealed (a secret and `encrypt`).
  [[nodiscard]] bool encrypts() const noexcept { return key_.has_value() && encrypt_; }

  /// Dialer, on connecting: a fresh nonce and this node's Challenge.
  void send_challenge(detail::Connection& connection) noexcept;
  /// Dialer, at the Challenge step: the acceptor's Challenge (checked, its MAC verified), then
  /// this node's Proof and Hello; or a Refuse (to the owner's Hello step).
  void on_acceptor_challenge(detail::Connection& connection, const schema::Header& header,
                             std::size_t wire) noexcept;
  /// Acceptor, at the Challenge step: the dialer's Challenge (checked: version, rank, a rejoin
  /// claim, a duplicate), then this node's Challenge with its MAC.
  void on_challenge(detail::Connection& connection, const schema::Header& header,
                    std::size_t wire) noexcept;
  /// Acceptor, at the Proof step: the dialer's Proof (its MAC verified), or its Refuse.
  void on_proof(detail::Connection& connection, const schema::Header& header,
                std::size_t wire) noexcept;

 private:
  /// What our proof (`ours`) or the peer's covers on `connection` to `peer_rank`.
  [[nodiscard]] auth::Transcript transcript(const detail::Connection& connection, bool ours,
                                            std::size_t peer_rank) const noexcept;
  /// The dialer refused our Challenge: kept as its last refusal, the connection closed.
  void on_dialer_refusal(detail::Connection& connection, const schema::Header& header,
                         std::size_t wire) noexcept;

  AuthenticatorOwner& owner_;
  std::optional<auth::Key> key_;  // derived from the secret (then wiped); none: no secret
  bool encrypt_;
  std::string job_name_;
  std::size_t rank_;
  bool rejoin_;
  std::size_t control_lane_;
  std::vector<PeerLink>& peers_;
  CounterBook& counters_;
};

}  // namespace gradmesh::net::tcp
