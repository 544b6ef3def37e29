#include "tasks/layers/layer_spec.h"

#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace gradmesh::tasks {
namespace {

constexpr std::string_view kDense = "dense";
constexpr std::string_view kRelu = "relu";
constexpr std::string_view kLoss = "softmax_cross_entropy";

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return s.substr(first, last - first + 1);
}

[[noreturn]] void bad_spec(std::string_view text, std::string_view why) {
  std::string msg = "expected 'dense:<units>', 'relu' or 'softmax_cross_entropy', got '";
  msg += text;
  msg += "'";
  if (!why.empty()) {
    msg += " (";
    msg += why;
    msg += ")";
  }
  throw std::invalid_argument(msg);
}

}  // namespace

std::string to_string(const LayerSpec& spec) {
  return spec.kind == kDense ? spec.kind + ":" + std::to_string(spec.units) : spec.kind;
}

LayerSpec parse_layer_spec(std::string_view text) {
  const std::string_view s = trim(text);
  if (s == kRelu) return LayerSpec{std::string(kRelu), 0};
  if (s == kLoss) return LayerSpec{std::string(kLoss), 0};
  const auto colon = s.find(':');
  if (colon == std::string_view::npos || s.substr(0, colon) != kDense) bad_spec(text, {});
  const std::string_view digits = s.substr(colon + 1);
  std::size_t units = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), units);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
    bad_spec(text, "units must be a decimal integer >= 1");
  }
  if (units == 0) bad_spec(text, "units must be >= 1");
  return LayerSpec{std::string(kDense), units};
}

std::vector<LayerSpec> parse_layer_specs(const std::vector<std::string>& texts) {
  if (texts.empty()) {
    throw std::invalid_argument(
        "model.layers: expected a list ending in 'softmax_cross_entropy', got an empty list");
  }
  std::vector<LayerSpec> specs;
  specs.reserve(texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string where = "model.layers[" + std::to_string(i) + "]: ";
    try {
      specs.push_back(parse_layer_spec(texts[i]));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where + e.what());
    }
    const bool last = i + 1 == texts.size();
    if (specs.back().kind == kLoss && !last) {
      throw std::invalid_argument(where + "'softmax_cross_entropy' must be the last entry, but " +
                                  std::to_string(texts.size() - 1 - i) + " more follow");
    }
    if (last && specs.back().kind != kLoss) {
      throw std::invalid_argument(where + "expected the last entry to be " +
                                  "'softmax_cross_entropy', got '" + texts[i] + "'");
    }
  }
  const bool has_dense =
      std::any_of(specs.begin(), specs.end(), [](const LayerSpec& s) { return s.kind == kDense; });
  if (!has_dense) {
    throw std::invalid_argument(
        "model.layers: expected at least one 'dense:<units>' entry, got none");
  }
  return specs;
}

}  // namespace gradmesh::tasks
