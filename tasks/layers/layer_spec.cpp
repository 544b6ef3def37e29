#include "tasks/layers/layer_spec.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/key_value_text.h"
#include "tasks/layers/layer_registry.h"
#include "tasks/layers/loss.h"

namespace gradmesh::tasks {
namespace {

constexpr std::string_view kDense = "dense";
constexpr std::string_view kConv = "conv2d";
constexpr std::string_view kPool = "max_pool2d";
constexpr std::string_view kAvgPool = "avg_pool2d";
constexpr std::string_view kGlobalAvgPool = "global_avg_pool";
constexpr std::string_view kBatchNorm = "batch_norm";
constexpr std::string_view kDropout = "dropout";
constexpr std::string_view kFlatten = "flatten";
constexpr std::string_view kRelu = "relu";
constexpr std::string_view kAdd = "add";
constexpr std::string_view kConcat = "concat";
constexpr std::string_view kBasicBlock = "basic_block";
constexpr std::string_view kBottleneckBlock = "bottleneck_block";
constexpr std::string_view kLoss = "softmax_cross_entropy";

constexpr std::string_view kDenseForm = "'dense:<units>'";
constexpr std::string_view kConvForm = "'conv2d:<filters>:<kernel>[:<stride>[:<padding>]]'";
constexpr std::string_view kPoolForm = "'max_pool2d:<window>[:<stride>]'";
constexpr std::string_view kAvgPoolForm = "'avg_pool2d:<window>[:<stride>]'";
constexpr std::string_view kDropoutForm = "'dropout:<p>'";
constexpr std::string_view kBlockForm = "'basic_block:<channels>[:<stride>]'";
constexpr std::string_view kBottleneckForm = "'bottleneck_block:<channels>[:<stride>]'";
constexpr std::string_view kAllForms =
    "'dense:<units>', 'conv2d:<filters>:<kernel>[:<stride>[:<padding>]]', "
    "'max_pool2d:<window>[:<stride>]', 'avg_pool2d:<window>[:<stride>]', 'global_avg_pool', "
    "'batch_norm', 'flatten', 'dropout:<p>', 'relu', 'add', 'concat', "
    "'basic_block:<channels>[:<stride>]', 'bottleneck_block:<channels>[:<stride>]' or "
    "'softmax_cross_entropy'";

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return s.substr(first, last - first + 1);
}

/// What an unknown kind may have meant: the nearest known kind (at most a third of its letters
/// off), and how a kind of one's own is registered and when.
std::string unknown_kind_hint(std::string_view kind, const std::vector<std::string>& kinds) {
  std::string best;
  std::size_t best_distance = 0;
  for (const std::string& k : kinds) {
    const std::size_t d = edit_distance(kind, k);
    if (best.empty() || d < best_distance) {
      best = k;
      best_distance = d;
    }
  }
  std::string out = "no layer kind '" + std::string(kind) + "'";
  if (!best.empty() && best_distance <= std::max<std::size_t>(2, best.size() / 3)) {
    out += "; did you mean '" + best + "'?";
  }
  return out + "; a kind of one's own must be registered with gradmesh::tasks::register_layer(\"" +
         std::string(kind) +
         "\", factory) before the config is read (before the Pipeline is "
         "constructed)";
}

[[noreturn]] void bad_spec(std::string_view forms, std::string_view text, std::string_view why) {
  std::string msg = "expected ";
  msg += forms;
  msg += ", got '";
  msg += text;
  msg += "'";
  if (!why.empty()) {
    msg += " (";
    msg += why;
    msg += ")";
  }
  throw std::invalid_argument(msg);
}

/// The ':'-separated fields after the kind ("conv2d:32:5" -> {"32", "5"}); empty items kept.
std::vector<std::string_view> fields_after_kind(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t colon = s.find(':');
  while (colon != std::string_view::npos) {
    s.remove_prefix(colon + 1);
    colon = s.find(':');
    out.push_back(s.substr(0, colon));
  }
  return out;
}

/// A decimal integer >= min, or nothing.
std::optional<std::size_t> parse_count(std::string_view digits, std::size_t min) {
  std::size_t v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || v < min) {
    return std::nullopt;
  }
  return v;
}

/// The integer fields of `form`: fields[i] names field i, the first `required` must be present,
/// the rest may be; min[i] is each one's least value.
template <std::size_t N>
std::array<std::size_t, N> parse_counts(std::string_view form, std::string_view text,
                                        const std::vector<std::string_view>& fields,
                                        std::size_t required,
                                        const std::array<std::string_view, N>& names,
                                        const std::array<std::size_t, N>& min) {
  if (fields.size() < required || fields.size() > N) {
    bad_spec(form, text,
             std::to_string(required) + (required == N ? "" : " to " + std::to_string(N)) +
                 " field(s) after the kind, got " + std::to_string(fields.size()));
  }
  std::array<std::size_t, N> out{};
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto v = parse_count(fields[i], min[i]);
    if (!v) {
      bad_spec(form, text,
               std::string(names[i]) + " must be a decimal integer >= " + std::to_string(min[i]));
    }
    out[i] = *v;
  }
  return out;
}

}  // namespace

std::span<const std::string_view> built_in_layer_kinds() noexcept {
  static constexpr std::array<std::string_view, 14> kKinds{
      kDense,   kConv, kPool, kAvgPool, kGlobalAvgPool, kBatchNorm,       kFlatten,
      kDropout, kRelu, kAdd,  kConcat,  kBasicBlock,    kBottleneckBlock, kLoss};
  return kKinds;
}

std::string to_string(const LayerSpec& spec) {
  std::string out = spec.name.empty() ? spec.kind : spec.name + " = " + spec.kind;
  const auto field = [&out](std::size_t v) { out += ":" + std::to_string(v); };
  if (spec.kind == kDense) {
    field(spec.units);
  } else if (spec.kind == kConv) {
    field(spec.units);
    field(spec.kernel);
    field(spec.stride);
    field(spec.padding);
  } else if (spec.kind == kPool || spec.kind == kAvgPool) {
    field(spec.kernel);
    field(spec.stride);
  } else if (spec.kind == kDropout) {
    std::array<char, 32> buf{};
    const auto result = std::to_chars(buf.data(), buf.data() + buf.size(), spec.probability);
    out += ":";
    out.append(buf.data(), result.ptr);
  } else if (spec.kind == kBasicBlock || spec.kind == kBottleneckBlock) {
    field(spec.units);
    field(spec.stride);
  } else if (!spec.args.empty()) {
    out += ":" + spec.args;
  }
  if (!spec.inputs.empty()) {
    out += " <-";
    for (const std::string& input : spec.inputs) out += " " + input;
  }
  return out;
}

namespace {

/// A name of an entry: a letter or '_', then letters, digits, '_', '.' or '-'.
bool is_name(std::string_view name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

constexpr std::string_view kGraphForm = "'[<name> =] <layer> [<- <input> ...]'";

LayerSpec parse_layer_kind(std::string_view text, std::string_view s);

}  // namespace

LayerSpec parse_layer_spec(std::string_view text) {
  std::string_view s = trim(text);
  std::string name;
  std::vector<std::string> inputs;
  if (const auto arrow = s.find("<-"); arrow != std::string_view::npos) {
    std::string_view list = s.substr(arrow + 2);
    s = trim(s.substr(0, arrow));
    while (!list.empty()) {
      const auto end = list.find_first_of(" \t,");
      const std::string_view item = list.substr(0, end);
      if (!item.empty()) {
        if (!is_name(item)) {
          bad_spec(kGraphForm, text,
                   "input '" + std::string(item) +
                       "' is no name: a letter or '_', then letters, digits, '_', '.' or '-'");
        }
        inputs.emplace_back(item);
      }
      if (end == std::string_view::npos) break;
      list.remove_prefix(end + 1);
    }
    if (inputs.empty()) bad_spec(kGraphForm, text, "'<-' names no input");
  }
  // A name comes before the kind: an '=' after a ':' belongs to a registered kind's arguments.
  if (const auto equals = s.find('='); equals != std::string_view::npos && equals < s.find(':')) {
    const std::string_view given = trim(s.substr(0, equals));
    if (!is_name(given)) {
      bad_spec(kGraphForm, text,
               "name '" + std::string(given) +
                   "' must be a letter or '_', then letters, digits, '_', '.' or '-'");
    }
    if (given == "input") bad_spec(kGraphForm, text, "'input' names the model's input");
    name = given;
    s = trim(s.substr(equals + 1));
  }
  LayerSpec spec = parse_layer_kind(text, s);
  spec.name = std::move(name);
  spec.inputs = std::move(inputs);
  return spec;
}

namespace {

LayerSpec parse_layer_kind(std::string_view text, std::string_view s) {
  for (const std::string_view bare :
       {kRelu, kLoss, kFlatten, kGlobalAvgPool, kBatchNorm, kAdd, kConcat}) {
    if (s == bare) return LayerSpec{std::string(bare)};
  }
  const std::string_view kind = s.substr(0, s.find(':'));
  const std::vector<std::string_view> fields = fields_after_kind(s);
  LayerSpec spec{std::string(kind)};
  if (kind == kDense) {
    if (fields.size() != 1) bad_spec(kDenseForm, text, "units must be a decimal integer >= 1");
    const auto units = parse_count(fields[0], 0);
    if (!units) bad_spec(kDenseForm, text, "units must be a decimal integer >= 1");
    if (*units == 0) bad_spec(kDenseForm, text, "units must be >= 1");
    spec.units = *units;
  } else if (kind == kConv) {
    const auto v = parse_counts<4>(kConvForm, text, fields, 2,
                                   {"filters", "kernel", "stride", "padding"}, {1, 1, 1, 0});
    spec.units = v[0];
    spec.kernel = v[1];
    spec.stride = fields.size() > 2 ? v[2] : 1;
    spec.padding = v[3];
  } else if (kind == kPool || kind == kAvgPool) {
    const auto v = parse_counts<2>(kind == kPool ? kPoolForm : kAvgPoolForm, text, fields, 1,
                                   {"window", "stride"}, {1, 1});
    spec.kernel = v[0];
    spec.stride = fields.size() > 1 ? v[1] : v[0];
  } else if (kind == kDropout) {
    double p = -1.0;
    if (fields.size() == 1) {
      const std::string_view f = fields[0];
      const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), p);
      if (f.empty() || ec != std::errc() || end != f.data() + f.size()) p = -1.0;
    }
    if (!std::isfinite(p) || p < 0.0 || p >= 1.0) {
      bad_spec(kDropoutForm, text, "p must be a decimal number with 0 <= p < 1");
    }
    spec.probability = p;
  } else if (kind == kBasicBlock || kind == kBottleneckBlock) {
    const auto v = parse_counts<2>(kind == kBasicBlock ? kBlockForm : kBottleneckForm, text, fields,
                                   1, {"channels", "stride"}, {1, 1});
    spec.units = v[0];
    spec.stride = fields.size() > 1 ? v[1] : 1;
  } else if (is_registered_layer(kind) || is_registered_loss(kind) ||
             AcceptUnknownLayerKinds::active()) {
    spec.args =
        std::string(s.size() > kind.size() ? s.substr(kind.size() + 1) : std::string_view{});
  } else {
    std::string forms(kAllForms);
    std::vector<std::string> kinds(built_in_layer_kinds().begin(), built_in_layer_kinds().end());
    for (const auto& users : {registered_layers(), registered_losses()}) {
      for (const std::string& user : users) {
        forms += ", '" + user + "[:<args>]'";
        kinds.push_back(user);
      }
    }
    bad_spec(forms, text, unknown_kind_hint(kind, kinds));
  }
  return spec;
}

/// Whether `kind` is a loss: the built-in one or a registered one.
bool is_loss_kind(std::string_view kind) { return kind == kLoss || is_registered_loss(kind); }

/// Whether `kind` was taken as a user's kind unregistered (AcceptUnknownLayerKinds): it may be a
/// loss the node program registers.
bool accepted_unknown(std::string_view kind) {
  if (!AcceptUnknownLayerKinds::active() || is_registered_layer(kind)) return false;
  const auto built_in = built_in_layer_kinds();
  return std::find(built_in.begin(), built_in.end(), kind) == built_in.end();
}

}  // namespace

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
    const std::string& kind = specs.back().kind;
    if (is_loss_kind(kind) && !last) {
      throw std::invalid_argument(where + "the loss '" + kind + "' must be the last entry, but " +
                                  std::to_string(texts.size() - 1 - i) + " more follow");
    }
    if (last && !is_loss_kind(kind) && !accepted_unknown(kind)) {
      throw std::invalid_argument(where +
                                  "expected the last entry to be 'softmax_cross_entropy' (or a "
                                  "loss kind registered with register_loss), got '" +
                                  texts[i] + "'");
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
