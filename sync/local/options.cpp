#include "sync/local/options.h"

#include <array>
#include <cmath>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace gradmesh::sync {

namespace {

/// A number (an integer reads as a float) for which `ok` holds; default `default_value`.
OptionKey number_key(std::string name, double default_value, std::string expected,
                     bool (*ok)(double)) {
  return {std::move(name), std::move(expected), false, default_value,
          [ok](const OptionValue& v) -> std::optional<OptionValue> {
            double x = 0;
            if (const auto* d = std::get_if<double>(&v)) {
              x = *d;
            } else if (const auto* i = std::get_if<std::int64_t>(&v)) {
              x = static_cast<double>(*i);
            } else {
              return std::nullopt;
            }
            if (!std::isfinite(x) || !ok(x)) return std::nullopt;
            return OptionValue{x};
          }};
}

// The config names of OuterKind's and OverlapKind's values, in their order.
constexpr std::array<std::string_view, 3> kOuterNames{"nesterov", "sgd", "average"};
constexpr std::array<std::string_view, 3> kOverlapNames{"off", "eager", "delayed"};

/// The value named `text` of an enum whose names are `names` (the first when none is).
template <class Kind, std::size_t N>
Kind kind_named(std::string_view text, const std::array<std::string_view, N>& names) {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == text) return static_cast<Kind>(i);
  }
  return static_cast<Kind>(0);
}

/// The choice key `name` over `names` (the first the default).
template <std::size_t N>
OptionKey names_key(std::string name, const std::array<std::string_view, N>& names) {
  return choice_key(std::move(name), std::vector<std::string>(names.begin(), names.end()));
}

}  // namespace

OptionTable local_option_table() {
  const LocalOptions d;
  return {"local",
          {word_or_integer_key("steps", "auto", 1, "\"auto\" or an integer >= 1 (iterations)"),
           names_key("outer", kOuterNames),
           number_key("outer_lr", d.outer_lr, "a number > 0", [](double x) { return x > 0.0; }),
           number_key("outer_momentum", d.outer_momentum, "a number in [0, 1)",
                      [](double x) { return x >= 0.0 && x < 1.0; }),
           names_key("overlap", kOverlapNames),
           integer_key("fragments", 1, 1, "fragments of the model, at most H"),
           word_or_integer_key("quorum", "all", 1, "\"all\" or a node count >= 1")}};
}

LocalOptions local_options(const OptionValues& values) {
  LocalOptions o;
  if (!values.is("local.steps", "auto")) {
    o.steps = static_cast<std::size_t>(values.integer("local.steps"));
  }
  o.outer = kind_named<OuterKind>(values.text("local.outer"), kOuterNames);
  o.outer_lr = values.number("local.outer_lr");
  o.outer_momentum = values.number("local.outer_momentum");
  o.overlap = kind_named<OverlapKind>(values.text("local.overlap"), kOverlapNames);
  o.fragments = static_cast<std::size_t>(values.integer("local.fragments"));
  if (!values.is("local.quorum", "all")) {
    o.quorum = static_cast<std::size_t>(values.integer("local.quorum"));
  }
  return o;
}

std::string outer_name(OuterKind kind) {
  return std::string(kOuterNames.at(static_cast<std::size_t>(kind)));
}

std::string overlap_name(OverlapKind kind) {
  return std::string(kOverlapNames.at(static_cast<std::size_t>(kind)));
}

}  // namespace gradmesh::sync
