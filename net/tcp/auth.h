#pragma once
// Who may join: the challenge-response that authenticates both ends of a connection with the job
// secret, before any other frame is read (protocol version 4).
//
//   dialer D                                         acceptor A
//   Challenge{version, D, nonce_D, secret?}    ->
//                                              <-    Challenge{version, A, nonce_A, secret?,
//                                                              mac_A = MAC("acceptor", nonce_A,
//                                                                          nonce_D, job, A, D)}
//   checks mac_A
//   Proof{mac_D = MAC("dialer", nonce_D, nonce_A, job, D, A)}, then Hello  ->
//                                                    checks mac_D, then reads the Hello
//
// MAC is HMAC-SHA-512-256 (libsodium crypto_auth) keyed by a key derived from the secret with
// BLAKE2b (crypto_generichash), so a secret of any length works. Each side MACs its own nonce
// first and labels its direction, so a proof can neither be replayed on another connection (fresh
// nonces) nor reflected back to its sender. With a secret, every frame after the Challenges and the
// Proof is encrypted and authenticated with keys derived from this exchange: the acceptor's from
// its Challenge on, the dialer's from its Hello on. Without a secret nothing is authenticated nor
// sealed from then on (net/tcp/frame_cipher.h) unless security.encrypt is false.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "net/frame.h"

namespace gradmesh::net::auth {

inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kKeyBytes = 32;
inline constexpr std::size_t kMacBytes = 32;

using Nonce = std::array<std::uint8_t, kNonceBytes>;
using Mac = std::array<std::uint8_t, kMacBytes>;

/// The MAC key derived from a job secret. Wipes itself on destruction. Not copyable by accident:
/// moved into the transport.
class Key final {
 public:
  /// BLAKE2b-256 of `secret` keyed with a fixed gradmesh label. `secret` must not be empty
  /// (ContractError). Throws gradmesh::Error when libsodium cannot initialise.
  explicit Key(std::string_view secret);
  Key(const Key&) = delete;
  Key& operator=(const Key&) = delete;
  Key(Key&& other) noexcept;
  Key& operator=(Key&& other) noexcept;
  ~Key();

  [[nodiscard]] const std::array<std::uint8_t, kKeyBytes>& bytes() const noexcept { return bytes_; }

 private:
  std::array<std::uint8_t, kKeyBytes> bytes_{};
};

/// Which end of the connection a proof comes from (part of what is MACed).
enum class Side : std::uint8_t { kDialer, kAcceptor };

/// What a proof covers besides the key: the sender's side, both nonces (the sender's first), the
/// job name and both ranks (the sender's first).
struct Transcript {
  Side side = Side::kDialer;
  const Nonce* own_nonce = nullptr;
  const Nonce* their_nonce = nullptr;
  std::string_view job_name;
  std::size_t own_rank = 0;
  std::size_t their_rank = 0;
};

/// Overwrites `text`'s characters with zeros (sodium_memzero) and empties it. Never throws.
void wipe(std::string& text) noexcept;

/// Fresh random bytes (libsodium randombytes_buf). Never throws.
[[nodiscard]] Nonce make_nonce() noexcept;

/// The proof of `transcript` under `key`. Never throws.
[[nodiscard]] Mac prove(const Key& key, const Transcript& transcript) noexcept;

/// Whether `mac` (any length: a wrong length is false) is the proof of `transcript` under `key`;
/// compared in constant time (crypto_auth_verify). Never throws.
[[nodiscard]] bool verify(const Key& key, const Transcript& transcript,
                          std::span<const std::uint8_t> mac) noexcept;

/// The fields of a received Challenge. Plain value type.
struct ChallengeFields {
  std::uint32_t protocol_version = kProtocolVersion;
  std::size_t rank = 0;
  Nonce nonce{};
  bool secret = false;
  std::span<const std::uint8_t> mac;  ///< points into the received frame
  bool rejoin = false;  ///< the dialer restarted and takes its rank back (TransportOptions::rejoin)
  bool encrypt = false;  ///< the sender seals its frames after the authentication
};

/// The fields of a verified `challenge`; std::nullopt with `error` set when its nonce is missing or
/// not kNonceBytes long. Never throws except std::bad_alloc.
[[nodiscard]] std::optional<ChallengeFields> decode_challenge(const schema::Challenge& challenge,
                                                              std::string& error);

/// Frame builders (control frames, counted under `control_lane`). `mac` empty without a secret;
/// `rejoin` only from a dialer that restarted (ChallengeFields::rejoin); `encrypt`: this end seals
/// its frames after the authentication (TransportOptions::encrypt with a secret).
[[nodiscard]] std::unique_ptr<OutgoingFrame> encode_challenge(
    std::size_t rank, const Nonce& nonce, bool secret, std::span<const std::uint8_t> mac,
    std::size_t control_lane, bool rejoin = false, bool encrypt = false);
[[nodiscard]] std::unique_ptr<OutgoingFrame> encode_proof(std::span<const std::uint8_t> mac,
                                                          std::size_t control_lane);

/// "" when both sides agree on using a job secret, else which rank has one and which has none,
/// e.g. "rank 0 has a job secret, rank 1 has none (...)". Never throws except std::bad_alloc.
[[nodiscard]] std::string secret_mismatch(std::size_t own_rank, bool own_secret,
                                          std::size_t their_rank, bool their_secret);
/// "" when both sides agree on sealing frames, else which rank seals and which does not, naming
/// security.encrypt. Never throws except std::bad_alloc.
[[nodiscard]] std::string encrypt_mismatch(std::size_t own_rank, bool own_encrypt,
                                           std::size_t their_rank, bool their_encrypt);

}  // namespace gradmesh::net::auth
