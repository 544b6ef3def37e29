#pragma once
// Text helpers for errors about configs: the keys two "key = value" texts disagree on, and how
// far a mistyped word is from the known ones.

#include <cstddef>
#include <string>
#include <string_view>

namespace gradmesh {

/// The keys whose values differ between two texts of "key = value" lines (one per line; other
/// lines are ignored), as "optimizer.lr = 0.1 <a_side>, 0.05 <b_side>" joined by "; ": the keys
/// of `a` sorted, then those only `b` has (a key one text lacks reads "no such key" on that side).
/// Empty when every key agrees. Used where two nodes' configs (the handshake) or a checkpoint's and
/// the current one
/// (--resume) disagree. Pure function; never throws beyond std::bad_alloc.
/// @param a_side, b_side  how each side is named, e.g. "on rank 0" / "on rank 1".
[[nodiscard]] std::string key_value_difference(const std::string& a, const std::string& b,
                                               std::string_view a_side, std::string_view b_side);

/// Levenshtein distance between `a` and `b` (insertions, deletions, substitutions of one char),
/// for "did you mean" hints on a mistyped config key or layer kind. O(|a| |b|) time, O(|b|)
/// memory. Pure.
[[nodiscard]] std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace gradmesh
