#include "net/tcp/frame_cipher.h"

#include <sodium.h>

#include <chrono>
#include <limits>
#include <vector>

#include "engine/error.h"

namespace gradmesh::net::auth {

namespace {

constexpr std::string_view kDialerToAcceptor = "gradmesh frames v1 dialer->acceptor";
constexpr std::string_view kAcceptorToDialer = "gradmesh frames v1 acceptor->dialer";
constexpr std::uint64_t kSpent = std::numeric_limits<std::uint64_t>::max();

void update(crypto_generichash_state& state, std::span<const std::uint8_t> bytes) {
  crypto_generichash_update(&state, bytes.data(), bytes.size());
}

void update(crypto_generichash_state& state, std::uint64_t value) {
  std::array<std::uint8_t, 8> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<std::uint8_t>(value >> (8 * i));  // little-endian
  update(state, bytes);
}

void update(crypto_generichash_state& state, std::string_view text) {
  update(state, std::uint64_t{text.size()});  // length first: no two inputs concatenate alike
  update(state, {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
}

// The key of one direction: keyed BLAKE2b-256 over the label and the transcript in the dialer's
// order (dialer nonce, acceptor nonce, job, dialer rank, acceptor rank), so both ends compute it
// alike whichever side they are.
CipherKey direction_key(const Key& key, std::string_view label, const Nonce& dialer_nonce,
                        const Nonce& acceptor_nonce, std::string_view job,
                        std::uint64_t dialer_rank, std::uint64_t acceptor_rank) noexcept {
  crypto_generichash_state state;
  crypto_generichash_init(&state, key.bytes().data(), key.bytes().size(), kKeyBytes);
  update(state, label);
  update(state, dialer_nonce);
  update(state, acceptor_nonce);
  update(state, job);
  update(state, dialer_rank);
  update(state, acceptor_rank);
  CipherKey out{};
  crypto_generichash_final(&state, out.data(), out.size());
  sodium_memzero(&state, sizeof(state));
  return out;
}

// The IETF nonce of message `counter`: the counter, little-endian, in the first 8 of 12 bytes.
std::array<unsigned char, crypto_aead_chacha20poly1305_IETF_NPUBBYTES> nonce_of(
    std::uint64_t counter) noexcept {
  std::array<unsigned char, crypto_aead_chacha20poly1305_IETF_NPUBBYTES> nonce{};
  for (std::size_t i = 0; i < 8; ++i) nonce[i] = static_cast<unsigned char>(counter >> (8 * i));
  return nonce;
}

const unsigned char* bytes_of(std::span<const std::byte> s) noexcept {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

SessionKeys::~SessionKeys() {
  sodium_memzero(send.data(), send.size());
  sodium_memzero(receive.data(), receive.size());
}

SessionKeys derive_session_keys(const Key& key, const Transcript& t) noexcept {
  const bool dialer = t.side == Side::kDialer;
  const Nonce& dialer_nonce = dialer ? *t.own_nonce : *t.their_nonce;
  const Nonce& acceptor_nonce = dialer ? *t.their_nonce : *t.own_nonce;
  const std::uint64_t dialer_rank = dialer ? t.own_rank : t.their_rank;
  const std::uint64_t acceptor_rank = dialer ? t.their_rank : t.own_rank;
  const CipherKey to_acceptor = direction_key(key, kDialerToAcceptor, dialer_nonce, acceptor_nonce,
                                              t.job_name, dialer_rank, acceptor_rank);
  const CipherKey to_dialer = direction_key(key, kAcceptorToDialer, dialer_nonce, acceptor_nonce,
                                            t.job_name, dialer_rank, acceptor_rank);
  SessionKeys keys;
  keys.send = dialer ? to_acceptor : to_dialer;
  keys.receive = dialer ? to_dialer : to_acceptor;
  return keys;
}

// sodium_init() is idempotent and thread safe; it picks the fastest implementation for the CPU.
// It fails only when libsodium cannot start at all (no entropy source), which the AEAD does not
// need: auth::Key, made before any connection, reports that case.
Sealer::Sealer(const CipherKey& key) noexcept : key_(key) {
  [[maybe_unused]] const int started = sodium_init();
}
Opener::Opener(const CipherKey& key) noexcept : key_(key) {
  [[maybe_unused]] const int started = sodium_init();
}

Sealer::~Sealer() { sodium_memzero(key_.data(), key_.size()); }
Opener::~Opener() { sodium_memzero(key_.data(), key_.size()); }

void Sealer::seal(std::span<const std::byte> associated, std::span<const std::byte> plain,
                  std::span<std::byte> out, std::span<std::byte, kTagBytes> tag) {
  GRADMESH_CHECK_EQ(out.size(), plain.size(), "Sealer::seal: output and input sizes differ");
  if (counter_ == kSpent)
    throw Error("frame cipher: 2^64 - 1 messages sealed under one key; a nonce would repeat");
  const auto nonce = nonce_of(counter_);
  crypto_aead_chacha20poly1305_ietf_encrypt_detached(
      reinterpret_cast<unsigned char*>(out.data()), reinterpret_cast<unsigned char*>(tag.data()),
      nullptr, bytes_of(plain), plain.size(), bytes_of(associated), associated.size(), nullptr,
      nonce.data(), key_.data());
  ++counter_;
}

bool Opener::open(std::span<const std::byte> associated, std::span<const std::byte> cipher,
                  std::span<std::byte> out, std::span<const std::byte, kTagBytes> tag) {
  GRADMESH_CHECK_EQ(out.size(), cipher.size(), "Opener::open: output and input sizes differ");
  if (counter_ == kSpent)
    throw Error("frame cipher: 2^64 - 1 messages opened under one key; a nonce would repeat");
  const auto nonce = nonce_of(counter_);
  const int rc = crypto_aead_chacha20poly1305_ietf_decrypt_detached(
      reinterpret_cast<unsigned char*>(out.data()), nullptr, bytes_of(cipher), cipher.size(),
      reinterpret_cast<const unsigned char*>(tag.data()), bytes_of(associated), associated.size(),
      nonce.data(), key_.data());
  if (rc != 0) return false;
  ++counter_;
  return true;
}

double measure_cipher_seconds_per_byte(double min_seconds) {
  GRADMESH_CHECK(min_seconds > 0, "measure_cipher_seconds_per_byte: min_seconds <= 0");
  constexpr std::size_t kBytes = std::size_t{1} << 20;
  std::vector<std::byte> message(kBytes, std::byte{0x5a});
  CipherKey key{};
  key[0] = 1;
  Sealer sealer(key);
  Opener opener(key);
  Tag tag{};
  std::size_t bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  double seconds = 0;
  while (seconds < min_seconds) {
    sealer.seal({}, message, message, tag);
    if (!opener.open({}, message, message, tag))
      throw Error("frame cipher: a sealed message did not open");
    bytes += kBytes;
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return seconds / static_cast<double>(bytes);
}

void Opener::skip() {
  if (counter_ == kSpent)
    throw Error("frame cipher: 2^64 - 1 messages opened under one key; a nonce would repeat");
  ++counter_;
}

}  // namespace gradmesh::net::auth
