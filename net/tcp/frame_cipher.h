#pragma once
// Authenticated encryption of frames after the handshake (issue 26, item 5): the per-connection
// keys and the AEAD with its nonces. The Connection (net/tcp/connection.h) seals each frame's
// header and payload as two messages, the prefix as the header's associated data.
//
// Keys: each connection derives two keys, one per direction, from the job key (auth::Key) and the
// handshake's transcript (both fresh 32-byte nonces, the job name, both ranks), with keyed BLAKE2b
// (libsodium crypto_generichash). A key is therefore new for every connection, and the two
// directions never share one. The AEAD is ChaCha20-Poly1305 (IETF, RFC 8439;
// crypto_aead_chacha20poly1305_ietf_*_detached) with a 96-bit nonce that is the direction's
// 64-bit message counter: under one key no nonce repeats, by construction, and the counter
// refuses to wrap (an Error, the connection then closes) instead of reusing one. The receiver
// expects the counter in order, so a replayed, dropped or reordered frame does not verify.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "net/tcp/auth.h"

namespace gradmesh::net::auth {

/// Bytes of the Poly1305 tag each sealed message carries.
inline constexpr std::size_t kTagBytes = 16;
using CipherKey = std::array<std::uint8_t, 32>;
using Tag = std::array<std::byte, kTagBytes>;

/// One connection's two keys, from this end's point of view. Wiped on destruction.
struct SessionKeys {
  CipherKey send{};     ///< what this end seals with (the peer opens with it)
  CipherKey receive{};  ///< what this end opens with (the peer seals with it)
  SessionKeys() = default;
  SessionKeys(const SessionKeys&) = delete;
  SessionKeys& operator=(const SessionKeys&) = delete;
  SessionKeys(SessionKeys&&) noexcept = default;
  SessionKeys& operator=(SessionKeys&&) noexcept = default;
  ~SessionKeys();
};

/// The keys of the connection whose handshake `transcript` describes (this end's side, nonce and
/// rank first, as auth::prove() takes it): both ends derive the same pair, swapped. Never throws.
[[nodiscard]] SessionKeys derive_session_keys(const Key& key,
                                              const Transcript& transcript) noexcept;

/// One direction's sealing end: encrypts and authenticates messages in order.
/// Thread safety: none (one connection's loop thread).
class Sealer final {
 public:
  explicit Sealer(const CipherKey& key) noexcept;
  ~Sealer();
  Sealer(const Sealer&) = delete;
  Sealer& operator=(const Sealer&) = delete;

  /// Encrypts `plain` into `out` (the same size; may be the same memory) and writes its tag;
  /// `associated` (e.g. a frame prefix) is authenticated, not encrypted. Uses, then advances,
  /// the counter. Throws gradmesh::Error when the counter is spent (2^64 - 1 messages: it never
  /// wraps to reuse a nonce) and ContractError when `out` differs in size from `plain`.
  void seal(std::span<const std::byte> associated, std::span<const std::byte> plain,
            std::span<std::byte> out, std::span<std::byte, kTagBytes> tag);
  /// The counter the next seal() uses (messages sealed so far).
  [[nodiscard]] std::uint64_t counter() const noexcept { return counter_; }
  /// Test hook: starts the counter at `counter` (the wrap test).
  void set_counter_for_testing(std::uint64_t counter) noexcept { counter_ = counter; }

 private:
  CipherKey key_;
  std::uint64_t counter_ = 0;
};

/// One direction's opening end: verifies and decrypts messages in the order they were sealed.
/// Thread safety: none (one connection's loop thread).
class Opener final {
 public:
  explicit Opener(const CipherKey& key) noexcept;
  ~Opener();
  Opener(const Opener&) = delete;
  Opener& operator=(const Opener&) = delete;

  /// Verifies `tag` over `associated` and `cipher` under the next counter and decrypts into `out`
  /// (the same size; may be the same memory). Returns false, writing nothing usable and leaving
  /// the counter as it was, when the message does not verify (altered, forged, replayed or out of
  /// order): the caller closes the connection and counts it. ContractError when `out` differs in
  /// size from `cipher`; gradmesh::Error when the counter is spent.
  [[nodiscard]] bool open(std::span<const std::byte> associated, std::span<const std::byte> cipher,
                          std::span<std::byte> out, std::span<const std::byte, kTagBytes> tag);
  /// Moves the counter past one message this end discards unread (the payload of a frame whose
  /// verified header is malformed), so the next message opens. gradmesh::Error when spent.
  void skip();
  [[nodiscard]] std::uint64_t counter() const noexcept { return counter_; }
  void set_counter_for_testing(std::uint64_t counter) noexcept { counter_ = counter; }

 private:
  CipherKey key_;
  std::uint64_t counter_ = 0;
};

/// What a sealed byte costs the CPU of its two ends: seconds to seal and then open one byte, on
/// this thread, in messages of kMaxSealedFragmentBytes' size (1 MiB), repeated for at least
/// `min_seconds` (> 0). For the planner (sync::NodeProfile::cipher_seconds_per_byte); about
/// 1.3e-9 s/byte (1,500 MB/s each way) on this project's machine. Throws std::bad_alloc.
[[nodiscard]] double measure_cipher_seconds_per_byte(double min_seconds = 0.02);

}  // namespace gradmesh::net::auth
