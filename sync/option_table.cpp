#include "sync/option_table.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "engine/error.h"
#include "topo/rate.h"

namespace gradmesh::sync {

namespace {

/// `value` for an error message: strings in double quotes.
std::string value_text(const OptionValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return "\"" + v + "\"";
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          std::array<char, 32> text{};  // shortest round-trip form: 2e+07, 0.5
          const auto end = std::to_chars(text.data(), text.data() + text.size(), v).ptr;
          return std::string(text.data(), end);
        } else {
          return std::to_string(v);
        }
      },
      value);
}

const OptionKey& declared(std::string_view key) {
  const OptionKey* k = find_option_key(key);
  if (k == nullptr) {
    throw ContractError("no option sync." + std::string(key) + " in the registry's option tables");
  }
  return *k;
}

[[noreturn]] void wrong_type(std::string_view key, std::string_view type) {
  throw ContractError("option sync." + std::string(key) + " read as " + std::string(type) +
                      ", but it holds another type");
}

}  // namespace

OptionKey choice_key(std::string name, std::vector<std::string> choices) {
  std::string expected = "one of ";
  for (std::size_t i = 0; i < choices.size(); ++i) expected += (i > 0 ? ", " : "") + choices[i];
  OptionValue first = choices.front();
  return {std::move(name), std::move(expected), true, std::move(first),
          [choices = std::move(choices)](const OptionValue& v) -> std::optional<OptionValue> {
            const auto* s = std::get_if<std::string>(&v);
            if (s == nullptr || std::find(choices.begin(), choices.end(), *s) == choices.end()) {
              return std::nullopt;
            }
            return v;
          }};
}

OptionKey flag_key(std::string name, bool default_value) {
  return {std::move(name), "true or false", false, default_value,
          [](const OptionValue& v) -> std::optional<OptionValue> {
            if (!std::holds_alternative<bool>(v)) return std::nullopt;
            return v;
          }};
}

OptionKey integer_key(std::string name, std::int64_t min, std::int64_t default_value,
                      std::string_view unit) {
  std::string expected = "an integer >= " + std::to_string(min);
  if (!unit.empty()) expected += " (" + std::string(unit) + ")";
  return {std::move(name), std::move(expected), false, default_value,
          [min](const OptionValue& v) -> std::optional<OptionValue> {
            const auto* i = std::get_if<std::int64_t>(&v);
            if (i == nullptr || *i < min) return std::nullopt;
            return v;
          }};
}

OptionKey fraction_key(std::string name, double default_value, std::string_view what) {
  std::string expected = "a number in (0, 1]";
  if (!what.empty()) expected += " (" + std::string(what) + ")";
  return {std::move(name), std::move(expected), false, default_value,
          [](const OptionValue& v) -> std::optional<OptionValue> {
            double x = 0.0;
            if (const auto* i = std::get_if<std::int64_t>(&v)) {
              x = static_cast<double>(*i);
            } else if (const auto* d = std::get_if<double>(&v)) {
              x = *d;
            } else {
              return std::nullopt;
            }
            if (!(x > 0.0 && x <= 1.0)) return std::nullopt;
            return x;
          }};
}

OptionKey word_or_integer_key(std::string name, std::string word, std::int64_t min,
                              std::string expected, std::function<bool(std::int64_t)> also) {
  OptionValue default_value = word;
  return {std::move(name), std::move(expected), false, std::move(default_value),
          [word = std::move(word), min,
           also = std::move(also)](const OptionValue& v) -> std::optional<OptionValue> {
            if (const auto* s = std::get_if<std::string>(&v)) {
              if (*s == word) return v;
              return std::nullopt;
            }
            const auto* i = std::get_if<std::int64_t>(&v);
            if (i == nullptr || *i < min || (also && !also(*i))) return std::nullopt;
            return v;
          }};
}

OptionKey word_or_rate_key(std::string name, std::string word) {
  std::string expected =
      "\"" + word +
      "\" or a rate > 0: a number of bytes/s, or a string such as \"100mbit\", \"12.5MB/s\" or "
      "\"1GiB\" (units: bit, kbit, mbit, gbit, kb, mb, gb, kib, mib, gib, with an optional "
      "\"/s\")";
  OptionValue default_value = word;
  return {std::move(name), std::move(expected), false, std::move(default_value),
          [word = std::move(word)](const OptionValue& v) -> std::optional<OptionValue> {
            if (const auto* s = std::get_if<std::string>(&v)) {
              if (*s == word) return v;
              try {
                return topo::parse_rate(*s);
              } catch (const std::invalid_argument&) {
                return std::nullopt;
              }
            }
            double rate = 0.0;
            if (const auto* i = std::get_if<std::int64_t>(&v)) {
              rate = static_cast<double>(*i);
            } else if (const auto* d = std::get_if<double>(&v)) {
              rate = *d;
            } else {
              return std::nullopt;
            }
            if (!std::isfinite(rate) || rate <= 0.0) return std::nullopt;
            return rate;
          }};
}

const OptionValue& OptionValues::get(std::string_view key) const {
  const OptionKey& k = declared(key);
  const auto it = values_.find(key);
  return it != values_.end() ? it->second : k.default_value;
}

bool OptionValues::try_set(std::string_view key, const OptionValue& value) {
  const OptionKey& k = declared(key);
  std::optional<OptionValue> canonical = k.canonical(value);
  if (!canonical) return false;
  values_.insert_or_assign(std::string(key), std::move(*canonical));
  return true;
}

void OptionValues::set(std::string_view key, const OptionValue& value) {
  if (!try_set(key, value)) {
    throw std::invalid_argument("sync." + std::string(key) + " = " + value_text(value) +
                                ": expected " + declared(key).expected);
  }
}

bool OptionValues::flag(std::string_view key) const {
  const auto* b = std::get_if<bool>(&get(key));
  if (b == nullptr) wrong_type(key, "a boolean");
  return *b;
}

std::int64_t OptionValues::integer(std::string_view key) const {
  const auto* i = std::get_if<std::int64_t>(&get(key));
  if (i == nullptr) wrong_type(key, "an integer");
  return *i;
}

double OptionValues::number(std::string_view key) const {
  const OptionValue& v = get(key);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* i = std::get_if<std::int64_t>(&v)) return static_cast<double>(*i);
  wrong_type(key, "a number");
}

const std::string& OptionValues::text(std::string_view key) const {
  const auto* s = std::get_if<std::string>(&get(key));
  if (s == nullptr) wrong_type(key, "a string");
  return *s;
}

bool OptionValues::is(std::string_view key, std::string_view word) const {
  const auto* s = std::get_if<std::string>(&get(key));
  return s != nullptr && *s == word;
}

bool operator==(const OptionValues& a, const OptionValues& b) {
  const auto covered = [](const OptionValues& x, const OptionValues& y) {
    return std::all_of(x.values_.begin(), x.values_.end(),
                       [&y](const auto& kv) { return y.get(kv.first) == kv.second; });
  };
  return covered(a, b) && covered(b, a);
}

}  // namespace gradmesh::sync
