#pragma once
// The acceptor's check of a dialer's Hello.

#include <cstddef>
#include <string>

#include "net/frame.h"

namespace gradmesh::net {

/// Compares a received Hello with this node's own fields. Returns "" when they match, else the
/// reason to refuse, naming what differs and both values, e.g.
/// "config hash differs: ours 0x00000000000004d2, theirs 0x000000000000162e".
/// Checks protocol version, job name, config hash, the peer list (size and each entry), and that
/// the claimed rank is in range and above `ours.rank` (ranks dial only lower ranks).
/// Duplicate claims are the transport's check (it knows which ranks are connected). Never throws
/// except std::bad_alloc.
[[nodiscard]] std::string check_hello(const HelloFields& ours, const HelloFields& theirs);

}  // namespace gradmesh::net
