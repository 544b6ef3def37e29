#include "net/tcp/auth.h"

#include <sodium.h>

#include <utility>

#include "engine/error.h"

namespace gradmesh::net::auth {

namespace {

// BLAKE2b key of the secret's derivation (16..64 bytes): another use of the same secret derives
// another key.
constexpr std::string_view kDerivationLabel = "gradmesh job secret key v1";
constexpr std::string_view kDialerLabel = "gradmesh auth v4 dialer";
constexpr std::string_view kAcceptorLabel = "gradmesh auth v4 acceptor";

void update(crypto_auth_hmacsha512256_state& state, std::span<const std::uint8_t> bytes) {
  crypto_auth_hmacsha512256_update(&state, bytes.data(), bytes.size());
}

void update(crypto_auth_hmacsha512256_state& state, std::uint64_t value) {
  std::array<std::uint8_t, 8> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<std::uint8_t>(value >> (8 * i));  // little-endian
  update(state, bytes);
}

void update(crypto_auth_hmacsha512256_state& state, std::string_view text) {
  update(state, std::uint64_t{text.size()});  // length first: no two transcripts concatenate alike
  update(state, {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
}

// One thread_local builder per thread, as frame.cpp's: handshakes are rare, but the same habit.
flatbuffers::FlatBufferBuilder& thread_builder() {
  thread_local flatbuffers::FlatBufferBuilder builder(256);
  builder.Clear();
  return builder;
}

std::unique_ptr<OutgoingFrame> finish(flatbuffers::FlatBufferBuilder& builder, schema::Body type,
                                      flatbuffers::Offset<void> body, std::size_t control_lane) {
  schema::FinishHeaderBuffer(builder, schema::CreateHeader(builder, type, body));
  return std::make_unique<OutgoingFrame>(
      std::span<const std::uint8_t>(builder.GetBufferPointer(), builder.GetSize()), Payload{},
      control_lane, FrameRole::kControl);
}

}  // namespace

Key::Key(std::string_view secret) {
  GRADMESH_CHECK(!secret.empty(), "auth::Key needs a non-empty secret");
  if (sodium_init() < 0) throw Error("libsodium failed to initialise (sodium_init)");
  crypto_generichash(bytes_.data(), bytes_.size(),
                     reinterpret_cast<const unsigned char*>(secret.data()), secret.size(),
                     reinterpret_cast<const unsigned char*>(kDerivationLabel.data()),
                     kDerivationLabel.size());
}

Key::Key(Key&& other) noexcept : bytes_(other.bytes_) {
  sodium_memzero(other.bytes_.data(), other.bytes_.size());
}

Key& Key::operator=(Key&& other) noexcept {
  if (this != &other) {
    bytes_ = other.bytes_;
    sodium_memzero(other.bytes_.data(), other.bytes_.size());
  }
  return *this;
}

Key::~Key() { sodium_memzero(bytes_.data(), bytes_.size()); }

void wipe(std::string& text) noexcept {
  sodium_memzero(text.data(), text.size());
  text.clear();
}

Nonce make_nonce() noexcept {
  Nonce nonce{};
  randombytes_buf(nonce.data(), nonce.size());  // initialises libsodium itself if needed
  return nonce;
}

Mac prove(const Key& key, const Transcript& transcript) noexcept {
  static_assert(kKeyBytes == crypto_auth_hmacsha512256_KEYBYTES);
  static_assert(kMacBytes == crypto_auth_hmacsha512256_BYTES);
  crypto_auth_hmacsha512256_state state;
  crypto_auth_hmacsha512256_init(&state, key.bytes().data(), key.bytes().size());
  update(state, transcript.side == Side::kDialer ? kDialerLabel : kAcceptorLabel);
  update(state, *transcript.own_nonce);
  update(state, *transcript.their_nonce);
  update(state, transcript.job_name);
  update(state, std::uint64_t{transcript.own_rank});
  update(state, std::uint64_t{transcript.their_rank});
  Mac mac{};
  crypto_auth_hmacsha512256_final(&state, mac.data());
  sodium_memzero(&state, sizeof(state));
  return mac;
}

bool verify(const Key& key, const Transcript& transcript,
            std::span<const std::uint8_t> mac) noexcept {
  if (mac.size() != kMacBytes) return false;
  const Mac expected = prove(key, transcript);
  return sodium_memcmp(expected.data(), mac.data(), kMacBytes) == 0;
}

std::optional<ChallengeFields> decode_challenge(const schema::Challenge& challenge,
                                                std::string& error) {
  const auto* nonce = challenge.nonce();
  if (nonce == nullptr || nonce->size() != kNonceBytes) {
    error = "Challenge nonce has " + std::to_string(nonce ? nonce->size() : 0) +
            " bytes, expected " + std::to_string(kNonceBytes);
    return std::nullopt;
  }
  ChallengeFields fields;
  fields.protocol_version = challenge.protocol_version();
  fields.rank = challenge.rank();
  std::copy(nonce->begin(), nonce->end(), fields.nonce.begin());
  fields.secret = challenge.secret();
  if (const auto* mac = challenge.mac()) fields.mac = {mac->data(), mac->size()};
  fields.rejoin = challenge.rejoin();
  fields.encrypt = challenge.encrypt();
  return fields;
}

std::unique_ptr<OutgoingFrame> encode_challenge(std::size_t rank, const Nonce& nonce, bool secret,
                                                std::span<const std::uint8_t> mac,
                                                std::size_t control_lane, bool rejoin,
                                                bool encrypt) {
  auto& builder = thread_builder();
  const auto nonce_vector = builder.CreateVector(nonce.data(), nonce.size());
  const auto mac_vector = builder.CreateVector(mac.data(), mac.size());
  const auto body =
      schema::CreateChallenge(builder, kProtocolVersion, static_cast<std::uint32_t>(rank),
                              nonce_vector, secret, mac_vector, rejoin, encrypt);
  return finish(builder, schema::Body::Challenge, body.Union(), control_lane);
}

std::unique_ptr<OutgoingFrame> encode_proof(std::span<const std::uint8_t> mac,
                                            std::size_t control_lane) {
  auto& builder = thread_builder();
  const auto body = schema::CreateProof(builder, builder.CreateVector(mac.data(), mac.size()));
  return finish(builder, schema::Body::Proof, body.Union(), control_lane);
}

namespace {

// "" when both ends agree on a yes / no setting, else "rank W <yes>, rank O <no> (<hint>)".
std::string disagreement(std::size_t own_rank, bool own, std::size_t their_rank, bool theirs,
                         std::string_view yes, std::string_view no, std::string_view hint) {
  if (own == theirs) return {};
  const std::size_t with = own ? own_rank : their_rank;
  const std::size_t without = own ? their_rank : own_rank;
  return "rank " + std::to_string(with) + " " + std::string(yes) + ", rank " +
         std::to_string(without) + " " + std::string(no) + " (" + std::string(hint) + ")";
}

}  // namespace

std::string secret_mismatch(std::size_t own_rank, bool own_secret, std::size_t their_rank,
                            bool their_secret) {
  return disagreement(own_rank, own_secret, their_rank, their_secret, "has a job secret",
                      "has none",
                      "set the same security.secret_file or GRADMESH_SECRET on every node");
}

std::string encrypt_mismatch(std::size_t own_rank, bool own_encrypt, std::size_t their_rank,
                             bool their_encrypt) {
  return disagreement(own_rank, own_encrypt, their_rank, their_encrypt, "encrypts its frames",
                      "does not", "set the same security.encrypt on every node");
}

}  // namespace gradmesh::net::auth
