#pragma once
// Data rates written by people: "100mbit", "12.5MB/s", "1GiB", "12500000".
//
// Used by the job config (net.max_send_rate, sync.ako.bandwidth) and by command-line options
// such as `gradmesh-node plan --bandwidth 1gbit`. Rates inside gradmesh are always bytes per
// second (the planner's B, DESIGN.md glossary).

#include <string>
#include <string_view>

namespace gradmesh::topo {

/// Parses a rate and returns it in bytes per second.
///
/// Accepted forms (units case-insensitive, optional blanks between number and unit):
///   - a plain number: bytes/s ("12500000", "1.5e6");
///   - bits/s, decimal prefixes: "1bit", "500kbit", "100mbit", "1gbit", "2tbit" (divided by 8);
///   - bytes/s, decimal prefixes: "10b", "10KB", "12.5MB", "1GB", "1TB";
///   - bytes/s, binary prefixes: "10KiB", "1MiB", "1GiB", "1TiB";
///   - each optionally followed by "/s" or "ps" ("100mbit/s", "1gbitps", "12.5MB/s", "10MBps").
/// "Mbps"-style forms whose unit ends in a lower-case "b" before "ps" ("100mbps") are rejected as
/// ambiguous (megabits or megabytes?): write "100mbit" or "12.5MB".
///
/// @throws std::invalid_argument if the text is not one of those forms, or the rate is not a
///         finite number > 0; the message quotes the text and lists the accepted forms.
[[nodiscard]] double parse_rate(std::string_view text);

/// Formats a rate given in bytes per second for people, in decimal units with both bytes and
/// bits, e.g. format_rate(12.5e6) == "12.5 MB/s (100 Mbit/s)". Four significant digits at most.
/// Never throws (beyond std::bad_alloc); non-finite or negative input is printed as is.
[[nodiscard]] std::string format_rate(double bytes_per_s);

}  // namespace gradmesh::topo
