#pragma once
// Internal to gradmesh_config: reading a job config's TOML values into fields (each returns false,
// the field untouched, for a value of the wrong type or out of range) and printing fields back as
// canonical TOML values; config_schema.cpp's keys are built from them.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

namespace gradmesh::app::detail {

// ---- reading TOML values ----

/// An integer; nullopt for another type.
[[nodiscard]] std::optional<std::int64_t> integer_of(const toml::node& n);
/// An integer or a float, finite.
[[nodiscard]] std::optional<double> number_of(const toml::node& n);
/// A string; null for another type.
[[nodiscard]] const std::string* string_of(const toml::node& n);
/// An integer >= min.
bool set_size(std::size_t& out, const toml::node& n, std::int64_t min);
/// `word` (e.g. "auto", "none") or an integer >= min.
bool set_optional_size(std::optional<std::size_t>& out, const toml::node& n, std::int64_t min,
                       std::string_view word);
/// `word` (e.g. "unlimited"), a rate string (topo::parse_rate) or a number of bytes/s, > 0.
bool set_optional_rate(std::optional<double>& out, const toml::node& n, std::string_view word);
/// `word` (e.g. "auto") or a finite number > 0 (>= 0 when `zero_allowed`).
bool set_optional_positive(std::optional<double>& out, const toml::node& n, std::string_view word,
                           bool zero_allowed = false);
/// One of `choices`.
template <std::size_t N>
inline bool set_choice(std::string& out, const toml::node& n,
                       const std::array<std::string_view, N>& choices) {
  const auto* s = string_of(n);
  if (s == nullptr || std::find(choices.begin(), choices.end(), *s) == choices.end()) return false;
  out = *s;
  return true;
}
/// A number in [0, 1) (momentum, Adam's betas).
bool set_fraction(double& out, const toml::node& n);
bool set_bool(bool& out, const toml::node& n);
/// Any string, "" included.
bool set_string(std::string& out, const toml::node& n);
bool set_non_empty_string(std::string& out, const toml::node& n);

// ---- printing canonical values ----

[[nodiscard]] std::string print_size(std::size_t v);
/// A TOML array, "[a, b, c]", of `values` each printed by `print`.
template <typename T, typename Print>
[[nodiscard]] std::string print_array(const std::vector<T>& values, Print print) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ", ";
    out += print(values[i]);
  }
  return out + "]";
}
/// The integer, or `word` quoted when unset.
[[nodiscard]] std::string print_optional_size(const std::optional<std::size_t>& v,
                                              std::string_view word);
/// The rate in bytes/s, or `word` quoted when unset.
[[nodiscard]] std::string print_optional_rate(const std::optional<double>& v,
                                              std::string_view word);

}  // namespace gradmesh::app::detail
