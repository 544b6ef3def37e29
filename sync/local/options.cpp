#include "sync/local/options.h"

#include <cmath>
#include <optional>

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

}  // namespace

OptionTable local_option_table() {
  const LocalOptions d;
  return {"local",
          {word_or_integer_key("steps", "auto", 1, "\"auto\" or an integer >= 1 (iterations)"),
           choice_key("outer", {"nesterov", "sgd", "average"}),
           number_key("outer_lr", d.outer_lr, "a number > 0", [](double x) { return x > 0.0; }),
           number_key("outer_momentum", d.outer_momentum, "a number in [0, 1)",
                      [](double x) { return x >= 0.0 && x < 1.0; })}};
}

LocalOptions local_options(const OptionValues& values) {
  LocalOptions o;
  if (!values.is("local.steps", "auto")) {
    o.steps = static_cast<std::size_t>(values.integer("local.steps"));
  }
  const std::string& outer = values.text("local.outer");
  o.outer = outer == "sgd"       ? OuterKind::kSgd
            : outer == "average" ? OuterKind::kAverage
                                 : OuterKind::kNesterov;
  o.outer_lr = values.number("local.outer_lr");
  o.outer_momentum = values.number("local.outer_momentum");
  return o;
}

std::string outer_name(OuterKind kind) {
  switch (kind) {
    case OuterKind::kSgd:
      return "sgd";
    case OuterKind::kAverage:
      return "average";
    case OuterKind::kNesterov:
      break;
  }
  return "nesterov";
}

}  // namespace gradmesh::sync
