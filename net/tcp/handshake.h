#pragma once
// The acceptor's checks of a dialer's Challenge and Hello.

#include <cstddef>
#include <string>

#include "net/frame.h"
#include "net/tcp/auth.h"

namespace gradmesh::net {

/// Compares a received Hello with this node's own fields. Returns "" when they match, else the
/// reason to refuse, naming what differs and both values, e.g.
/// "config differs: optimizer.lr = 0.05 on rank 1, 0.1 on rank 0 (...)" (each key that differs,
/// the sides named by rank; the two hashes when either Hello carries no config text).
/// Checks protocol version, job name, view, config hash, the peer list (size and each entry), and
/// that the claimed rank is in range and above `ours.rank` (ranks dial only lower ranks; a dialer
/// that rejoins, HelloFields::rejoin, dials every rank and may be below).
/// Duplicate claims are the transport's check (it knows which ranks are connected). Never throws
/// except std::bad_alloc.
[[nodiscard]] std::string check_hello(const HelloFields& ours, const HelloFields& theirs);

/// The acceptor's check of a dialer's Challenge, before any proof: protocol version, the claimed
/// rank (in range of `peers`, above `own_rank` unless the Challenge says it rejoins), and that both
/// sides agree on using a job secret and on sealing frames (`own_encrypt`).
/// Returns "" or the reason to refuse, naming both values. Never throws except std::bad_alloc.
[[nodiscard]] std::string check_challenge(const auth::ChallengeFields& theirs, std::size_t own_rank,
                                          std::size_t peers, bool own_secret, bool own_encrypt);

/// The dialer's check of the acceptor's Challenge, before its proof: protocol version, that it
/// answers as `expected_rank` (the rank we dialed), and that both sides agree on using a job
/// secret and on sealing frames. Returns "" or the reason to refuse. Never throws except
/// std::bad_alloc.
[[nodiscard]] std::string check_acceptor_challenge(const auth::ChallengeFields& theirs,
                                                   std::size_t own_rank, std::size_t expected_rank,
                                                   bool own_secret, bool own_encrypt);

}  // namespace gradmesh::net
