#pragma once
// SLURM's compressed host lists ("node[01-03,07],login1"), expanded to one name per host.
//
// Debian ships no C++ library for this syntax and `scontrol show hostnames` exists only where
// SLURM's client tools are installed, so gradmesh parses it itself: a pure function, no I/O.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gradmesh::topo {

/// Most hosts one list may expand to (a guard against "n[0-999999999]" typos).
inline constexpr std::size_t kMaxHostlistHosts = 65536;

/// Expands a SLURM host list into host names, in SLURM's order.
///
/// Syntax (as `scontrol show hostnames` reads it): entries separated by commas outside brackets;
/// an entry is a name with zero or more bracket groups, each a comma-separated list of numbers
/// `N` or ranges `N-M` (N <= M, decimal digits). A group's numbers keep the width of the range's
/// lower bound (zero padding): `node[08-10]` -> node08, node09, node10. Several groups in one
/// entry expand as a product, the leftmost group slowest: `r[1-2]n[1-2]` -> r1n1, r1n2, r2n1,
/// r2n2. Examples: `node[01-03,07]` -> node01, node02, node03, node07; `a1,b[1-2]` -> a1, b1, b2.
///
/// `what` names where the list came from (e.g. "SLURM_JOB_NODELIST") for error messages.
/// Throws gradmesh::ConfigError naming `what`, the list, the position and what was expected when
/// the list is empty, has an empty entry, an unclosed, nested or stray bracket, an empty group,
/// a non-digit or empty bound in a group, a range whose upper bound is below its lower bound,
/// or expands to more than kMaxHostlistHosts names. Duplicates are left to PeerList.
[[nodiscard]] std::vector<std::string> expand_hostlist(std::string_view list,
                                                       std::string_view what);

}  // namespace gradmesh::topo
