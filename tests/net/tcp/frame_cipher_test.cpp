// Tests for net/tcp/frame_cipher.h: per-connection keys, the AEAD, and its nonce counters.

#include "net/tcp/frame_cipher.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/error.h"

using namespace gradmesh::net::auth;

namespace {

std::vector<std::byte> bytes_of(std::string_view text) {
  std::vector<std::byte> out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

Nonce nonce_filled(std::uint8_t value) {
  Nonce n{};
  n.fill(value);
  return n;
}

}  // namespace

TEST_CASE("both ends derive the same two keys, swapped, and another connection gets others",
          "[net][cipher]") {
  const Key key("job secret");
  const Nonce a = nonce_filled(1), b = nonce_filled(2), c = nonce_filled(3);
  const SessionKeys dialer =
      derive_session_keys(key, Transcript{Side::kDialer, &a, &b, "job", 2, 0});
  const SessionKeys acceptor =
      derive_session_keys(key, Transcript{Side::kAcceptor, &b, &a, "job", 0, 2});
  CHECK(dialer.send == acceptor.receive);
  CHECK(dialer.receive == acceptor.send);
  CHECK(dialer.send != dialer.receive);  // the directions never share a key
  // A fresh nonce (a new connection), another job, other ranks or another secret: other keys.
  CHECK(derive_session_keys(key, Transcript{Side::kDialer, &c, &b, "job", 2, 0}).send !=
        dialer.send);
  CHECK(derive_session_keys(key, Transcript{Side::kDialer, &a, &b, "jab", 2, 0}).send !=
        dialer.send);
  CHECK(derive_session_keys(key, Transcript{Side::kDialer, &a, &b, "job", 3, 0}).send !=
        dialer.send);
  CHECK(derive_session_keys(Key("other"), Transcript{Side::kDialer, &a, &b, "job", 2, 0}).send !=
        dialer.send);
}

TEST_CASE("a sealed message opens on the other end, in place too, in order", "[net][cipher]") {
  const Key key("job secret");
  const Nonce a = nonce_filled(1), b = nonce_filled(2);
  const SessionKeys keys = derive_session_keys(key, Transcript{Side::kDialer, &a, &b, "job", 1, 0});
  Sealer sealer(keys.send);
  Opener opener(keys.send);
  const auto prefix = bytes_of("prefix!!");
  for (int i = 0; i < 3; ++i) {
    const auto plain = bytes_of("gradients " + std::to_string(i));
    std::vector<std::byte> sealed(plain.size());
    Tag tag{};
    sealer.seal(prefix, plain, sealed, tag);
    CHECK(sealed != plain);
    std::vector<std::byte> opened = sealed;  // in place
    REQUIRE(opener.open(prefix, opened, opened, tag));
    CHECK(opened == plain);
  }
  CHECK(sealer.counter() == 3);
  CHECK(opener.counter() == 3);
  // The same plaintext twice gives two ciphertexts (the nonce moved on).
  const auto plain = bytes_of("same");
  std::vector<std::byte> one(plain.size()), two(plain.size());
  Tag t1{}, t2{};
  sealer.seal({}, plain, one, t1);
  sealer.seal({}, plain, two, t2);
  CHECK(one != two);
}

TEST_CASE("a flipped bit, a replay, a reorder or the wrong key does not open, and changes nothing",
          "[net][cipher]") {
  const Key key("job secret");
  const Nonce a = nonce_filled(1), b = nonce_filled(2);
  const SessionKeys keys = derive_session_keys(key, Transcript{Side::kDialer, &a, &b, "job", 1, 0});
  Sealer sealer(keys.send);
  const auto prefix = bytes_of("prefix!!");
  const auto plain = bytes_of("a gradient of some length");
  std::vector<std::byte> first(plain.size()), second(plain.size()), out(plain.size());
  Tag first_tag{}, second_tag{};
  sealer.seal(prefix, plain, first, first_tag);
  sealer.seal(prefix, plain, second, second_tag);

  Opener opener(keys.send);
  for (std::size_t bit : {0u, 7u, 100u}) {  // in the ciphertext
    auto bad = first;
    bad[bit / 8] ^= std::byte(1u << (bit % 8));
    CHECK_FALSE(opener.open(prefix, bad, out, first_tag));
  }
  Tag bad_tag = first_tag;
  bad_tag[5] ^= std::byte{0x10};
  CHECK_FALSE(opener.open(prefix, first, out, bad_tag));
  auto bad_prefix = prefix;
  bad_prefix[0] ^= std::byte{1};  // the associated data is authenticated
  CHECK_FALSE(opener.open(bad_prefix, first, out, first_tag));
  CHECK_FALSE(opener.open(prefix, second, out, second_tag));  // out of order
  CHECK(opener.counter() == 0);                               // none of the failures moved it
  CHECK_FALSE(
      Opener(keys.receive).open(prefix, first, out, first_tag));  // the other direction's key
  REQUIRE(opener.open(prefix, first, out, first_tag));
  CHECK(out == plain);
  CHECK_FALSE(opener.open(prefix, first, out, first_tag));  // a replay
  REQUIRE(opener.open(prefix, second, out, second_tag));
}

TEST_CASE("the nonce counter refuses to wrap instead of reusing a nonce", "[net][cipher]") {
  CipherKey key{};
  key.fill(7);
  Sealer sealer(key);
  Opener opener(key);
  constexpr std::uint64_t kLast = std::numeric_limits<std::uint64_t>::max() - 1;
  sealer.set_counter_for_testing(kLast);
  opener.set_counter_for_testing(kLast);
  const auto plain = bytes_of("last");
  std::vector<std::byte> sealed(plain.size()), out(plain.size());
  Tag tag{};
  sealer.seal({}, plain, sealed, tag);  // the last nonce there is
  REQUIRE(opener.open({}, sealed, out, tag));
  CHECK(out == plain);
  CHECK_THROWS_AS(sealer.seal({}, plain, sealed, tag), gradmesh::Error);
  CHECK_THROWS_WITH(sealer.seal({}, plain, sealed, tag), Catch::Contains("a nonce would repeat"));
  CHECK_THROWS_AS(opener.open({}, sealed, out, tag), gradmesh::Error);
  std::vector<std::byte> wrong(plain.size() + 1);
  CHECK_THROWS_AS(Sealer(key).seal({}, plain, wrong, tag), gradmesh::ContractError);
}
