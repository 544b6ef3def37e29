#include "apps/config/toml_values.h"

#include <cmath>
#include <stdexcept>

#include "apps/config/config_schema.h"
#include "topo/rate.h"

namespace gradmesh::app::detail {

// ---- reading TOML values ----

std::optional<std::int64_t> integer_of(const toml::node& n) {
  if (const auto* v = n.as_integer()) return v->get();
  return std::nullopt;
}

/// An integer or a float, finite.
std::optional<double> number_of(const toml::node& n) {
  if (const auto* v = n.as_integer()) return static_cast<double>(v->get());
  if (const auto* v = n.as_floating_point()) {
    if (std::isfinite(v->get())) return v->get();
  }
  return std::nullopt;
}

const std::string* string_of(const toml::node& n) {
  if (const auto* v = n.as_string()) return &v->get();
  return nullptr;
}

bool set_size(std::size_t& out, const toml::node& n, std::int64_t min) {
  const auto v = integer_of(n);
  if (!v || *v < min) return false;
  out = static_cast<std::size_t>(*v);
  return true;
}

/// `word` (e.g. "auto", "none") or an integer >= min.
bool set_optional_size(std::optional<std::size_t>& out, const toml::node& n, std::int64_t min,
                       std::string_view word) {
  if (const auto* s = string_of(n)) {
    if (*s != word) return false;
    out.reset();
    return true;
  }
  std::size_t v = 0;
  if (!set_size(v, n, min)) return false;
  out = v;
  return true;
}

/// `word` (e.g. "unlimited"), a rate string (parse_rate) or a number of bytes/s, > 0.
bool set_optional_rate(std::optional<double>& out, const toml::node& n, std::string_view word) {
  if (const auto* s = string_of(n)) {
    if (*s == word) {
      out.reset();
      return true;
    }
    try {
      out = topo::parse_rate(*s);
      return true;
    } catch (const std::invalid_argument&) {
      return false;
    }
  }
  const auto v = number_of(n);
  if (!v || *v <= 0.0) return false;
  out = *v;
  return true;
}

/// `word` (e.g. "auto") or a finite number > 0 (>= 0 when `zero_allowed`).
bool set_optional_positive(std::optional<double>& out, const toml::node& n, std::string_view word,
                           bool zero_allowed) {
  if (const auto* s = string_of(n)) {
    if (*s != word) return false;
    out.reset();
    return true;
  }
  const auto v = number_of(n);
  if (!v || *v < 0.0 || (*v == 0.0 && !zero_allowed)) return false;
  out = *v;
  return true;
}

/// A number in [0, 1) (momentum, Adam's betas).
bool set_fraction(double& out, const toml::node& n) {
  const auto v = number_of(n);
  if (!v || *v < 0.0 || *v >= 1.0) return false;
  out = *v;
  return true;
}

bool set_bool(bool& out, const toml::node& n) {
  const auto* v = n.as_boolean();
  if (v == nullptr) return false;
  out = v->get();
  return true;
}

bool set_string(std::string& out, const toml::node& n) {
  const auto* s = string_of(n);
  if (s != nullptr) out = *s;
  return s != nullptr;
}

bool set_non_empty_string(std::string& out, const toml::node& n) {
  const auto* s = string_of(n);
  if (s == nullptr || s->empty()) return false;
  out = *s;
  return true;
}

// ---- printing canonical values ----

std::string print_size(std::size_t v) { return std::to_string(v); }

std::string print_optional_size(const std::optional<std::size_t>& v, std::string_view word) {
  return v ? std::to_string(*v) : toml_quote(word);
}

std::string print_optional_rate(const std::optional<double>& v, std::string_view word) {
  return v ? toml_float(*v) : toml_quote(word);
}

}  // namespace gradmesh::app::detail
