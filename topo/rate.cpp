#include "topo/rate.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <system_error>

namespace gradmesh::topo {
namespace {

constexpr std::string_view kAcceptedForms =
    "expected a rate > 0 such as \"100mbit\", \"1gbit\", \"12.5MB/s\", \"1MiB\" or a plain number "
    "of bytes/s; units: bit, kbit, mbit, gbit, tbit (bits/s), b, kb, mb, gb, tb (bytes/s, "
    "decimal), kib, mib, gib, tib (bytes/s, binary), optionally followed by \"/s\" or \"ps\"";

/// One accepted unit: its lower-case spelling and how many bytes/s one of it is.
struct Unit {
  std::string_view name;
  double bytes_per_s;
};

constexpr std::array<Unit, 15> kUnits{{
    {"", 1.0},
    {"b", 1.0},
    {"kb", 1e3},
    {"mb", 1e6},
    {"gb", 1e9},
    {"tb", 1e12},
    {"kib", 1024.0},
    {"mib", 1024.0 * 1024.0},
    {"gib", 1024.0 * 1024.0 * 1024.0},
    {"tib", 1024.0 * 1024.0 * 1024.0 * 1024.0},
    {"bit", 1.0 / 8.0},
    {"kbit", 1e3 / 8.0},
    {"mbit", 1e6 / 8.0},
    {"gbit", 1e9 / 8.0},
    {"tbit", 1e12 / 8.0},
}};

bool is_blank(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

[[noreturn]] void reject(std::string_view text, std::string_view why = {}) {
  std::string message = "bad rate \"" + std::string(text) + "\"";
  if (!why.empty()) message += " (" + std::string(why) + ")";
  message += ": ";
  message += kAcceptedForms;
  throw std::invalid_argument(message);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

double parse_rate(std::string_view text) {
  const std::string_view body = trim(text);
  if (body.empty()) reject(text, "empty");

  double number = 0.0;
  const char* const begin = body.data();
  const char* const end = body.data() + body.size();
  const auto [number_end, ec] = std::from_chars(begin, end, number, std::chars_format::general);
  if (ec != std::errc{} || number_end == begin) reject(text, "no number");
  if (!std::isfinite(number) || number <= 0.0) reject(text, "not a finite number > 0");

  const std::string_view unit =
      trim(std::string_view(number_end, static_cast<std::size_t>(end - number_end)));
  // Strip "/s" or "ps". A lower-case 'b' right before "ps" is "Mbps" notation: bits to most
  // people, bytes under case-insensitive units, so refuse to guess.
  const std::string unit_lower = lower(unit);
  std::string_view unit_key = unit_lower;
  if (unit_key.ends_with("/s")) {
    unit_key.remove_suffix(2);
  } else if (unit_key.ends_with("ps")) {
    if (unit.size() >= 3 && unit[unit.size() - 3] == 'b')
      reject(text, "ambiguous \"bps\": write \"mbit\" for bits or \"MB\" for bytes");
    unit_key.remove_suffix(2);
  }
  unit_key = trim(unit_key);
  if (unit_key.ends_with("bits")) unit_key.remove_suffix(1);

  for (const Unit& u : kUnits) {
    if (u.name == unit_key) {
      const double rate = number * u.bytes_per_s;
      if (!std::isfinite(rate)) reject(text, "too large");
      return rate;
    }
  }
  reject(text, "unknown unit \"" + std::string(unit) + "\"");
}

std::string format_rate(double bytes_per_s) {
  static constexpr std::array<std::string_view, 5> kPrefixes{"", "k", "M", "G", "T"};
  auto scaled = [](double value, std::string_view base) {
    std::size_t i = 0;
    while (i + 1 < kPrefixes.size() && std::fabs(value) >= 1000.0) {
      value /= 1000.0;
      ++i;
    }
    std::array<char, 64> buf{};
    std::snprintf(buf.data(), buf.size(), "%.4g", value);
    return std::string(buf.data()) + " " + std::string(kPrefixes[i]) + std::string(base);
  };
  return scaled(bytes_per_s, "B/s") + " (" + scaled(bytes_per_s * 8.0, "bit/s") + ")";
}

}  // namespace gradmesh::topo
