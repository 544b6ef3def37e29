#include "apps/config/config_schema.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <variant>

#include "apps/config/toml_values.h"
#include "sync/sync_stage.h"
#include "tasks/layers/layer_spec.h"
#include "topo/rate.h"

namespace gradmesh::app::detail {
namespace {

constexpr std::array<std::string_view, 2> kLrSchedules{"constant", "cosine"};
constexpr std::array<std::string_view, 3> kOnNonFinite{"stop", "rollback", "off"};
constexpr std::array<std::string_view, 3> kOptimizers{"sgd", "adam", "adamw"};
constexpr std::array<std::string_view, 2> kDatasets{"fashion-mnist", "synthetic"};
/// data.shape's most floats a sample (64 MiB): beyond it a batch would not fit a node.
constexpr std::size_t kMaxSampleFloats = std::size_t{1} << 24;
constexpr std::array<std::string_view, 2> kNormalizations{"none", "standardize"};
constexpr std::array<std::string_view, 2> kDevices{"cpu", "cuda"};
constexpr std::array<std::string_view, 3> kCpuKernels{"auto", "onednn", "builtin"};

/// The strategies' and schemes' own tables, [sync.<table>] (sync/option_table.h).
constexpr std::string_view kOptionPrefix = "sync.";

constexpr std::string_view kSendRateExpected =
    "\"unlimited\" or a rate > 0: a number of bytes/s, or a string such as \"100mbit\", "
    "\"12.5MB/s\" or \"1GiB\" (units: bit, kbit, mbit, gbit, kb, mb, gb, kib, mib, gib, with an "
    "optional \"/s\")";
constexpr std::string_view kBandwidthExpected =
    "\"auto\" or a rate > 0: a number of bytes/s, or a string such as \"100mbit\", "
    "\"12.5MB/s\" or \"1GiB\" (units: bit, kbit, mbit, gbit, kb, mb, gb, kib, mib, gib, with an "
    "optional \"/s\")";

// Sorted by key: key_specs() promises it and find_key() relies on it.
constexpr std::array<KeySpec, 45> kKeys{{
    {"checkpoint.dir",
     "a string: the folder of the checkpoints (node-<rank>/ under it), or \"\" (none)",
     OverrideKind::kString,
     [](JobConfig& c, const toml::node& n) { return set_string(c.checkpoint.dir, n); },
     [](const JobConfig& c) { return toml_quote(c.checkpoint.dir); }},
    {"checkpoint.every",
     "\"epoch\" (at the end of every epoch) or an integer >= 1 (iterations between checkpoints)",
     OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       return set_optional_size(c.checkpoint.every, n, 1, "epoch");
     },
     [](const JobConfig& c) { return print_optional_size(c.checkpoint.every, "epoch"); }},
    {"checkpoint.keep", "an integer >= 1 (a node's newest checkpoints kept on disk)",
     OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) { return set_size(c.checkpoint.keep, n, 1); },
     [](const JobConfig& c) { return print_size(c.checkpoint.keep); }},
    {"compute.cpu_kernels",
     "\"auto\", \"onednn\" or \"builtin\" (the CPU backend's GEMM: oneDNN's, or OpenBLAS's "
     "with gradmesh's own loops; auto: oneDNN where this binary has it)",
     OverrideKind::kString,
     [](JobConfig& c, const toml::node& n) {
       return set_choice(c.compute.cpu_kernels, n, kCpuKernels);
     },
     [](const JobConfig& c) { return toml_quote(c.compute.cpu_kernels); }},
    {"compute.device",
     "\"cpu\" or \"cuda\" (where layers compute: the host (compute.cpu_kernels), or cuBLAS and "
     "CUDA "
     "kernels on GPU 0)",
     OverrideKind::kString,
     [](JobConfig& c, const toml::node& n) { return set_choice(c.compute.device, n, kDevices); },
     [](const JobConfig& c) { return toml_quote(c.compute.device); }},
    {"compute.threads",
     "an integer >= 0 (BLAS and CPU-kernel threads; 0 = the host's cores / its nodes)",
     OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) { return set_size(c.compute.threads, n, 0); },
     [](const JobConfig& c) { return print_size(c.compute.threads); }},
    {"data.classes", "an integer >= 2 (the classes of synthetic data)", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) { return set_size(c.data.classes, n, 2); },
     [](const JobConfig& c) { return print_size(c.data.classes); }},
    {"data.dataset",
     "\"fashion-mnist\" (the files under data.path) or \"synthetic\" (generated from job.seed: "
     "data.shape, data.classes)",
     OverrideKind::kString,
     [](JobConfig& c, const toml::node& n) { return set_choice(c.data.dataset, n, kDatasets); },
     [](const JobConfig& c) { return toml_quote(c.data.dataset); }},
    {"data.normalize",
     "\"none\" or \"standardize\" (inputs mapped to the training set's zero mean and unit "
     "standard deviation)",
     OverrideKind::kString,
     [](JobConfig& c, const toml::node& n) {
       return set_choice(c.data.normalize, n, kNormalizations);
     },
     [](const JobConfig& c) { return toml_quote(c.data.normalize); }},
    {"data.path", "a non-empty string (the folder holding the dataset's files)",
     OverrideKind::kString,
     [](JobConfig& c, const toml::node& n) { return set_non_empty_string(c.data.path, n); },
     [](const JobConfig& c) { return toml_quote(c.data.path); }},
    {"data.shape",
     "an array of 1 or 3 integers >= 1: one sample's [features] or [channels, height, width] "
     "(synthetic data; at most 16777216 floats)",
     OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       const auto* array = n.as_array();
       if (array == nullptr || (array->size() != 1 && array->size() != 3)) return false;
       std::vector<std::size_t> shape;
       std::size_t floats = 1;
       for (const toml::node& element : *array) {
         const auto v = integer_of(element);
         if (!v || *v < 1 || *v > static_cast<std::int64_t>(kMaxSampleFloats)) return false;
         floats *= static_cast<std::size_t>(*v);
         if (floats > kMaxSampleFloats) return false;
         shape.push_back(static_cast<std::size_t>(*v));
       }
       c.data.shape = std::move(shape);
       return true;
     },
     [](const JobConfig& c) {
       return print_array(c.data.shape, [](std::size_t v) { return std::to_string(v); });
     }},
    {"data.test_limit", "\"none\" or an integer >= 1 (test images to evaluate on)",
     OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       return set_optional_size(c.data.test_limit, n, 1, "none");
     },
     [](const JobConfig& c) { return print_optional_size(c.data.test_limit, "none"); }},
    {"data.train_limit", "\"none\" or an integer >= 1 (training images to use)",
     OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       return set_optional_size(c.data.train_limit, n, 1, "none");
     },
     [](const JobConfig& c) { return print_optional_size(c.data.train_limit, "none"); }},
    {"job.epochs", "an integer >= 1", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) { return set_size(c.job.epochs, n, 1); },
     [](const JobConfig& c) { return print_size(c.job.epochs); }},
    {"job.max_iterations", "\"none\" or an integer >= 1 (iterations per node)", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       return set_optional_size(c.job.max_iterations, n, 1, "none");
     },
     [](const JobConfig& c) { return print_optional_size(c.job.max_iterations, "none"); }},
    {"job.name", "a non-empty string", OverrideKind::kString,
     [](JobConfig& c, const toml::node& n) { return set_non_empty_string(c.job.name, n); },
     [](const JobConfig& c) { return toml_quote(c.job.name); }},
    {"job.on_nonfinite", "one of stop, rollback, off", OverrideKind::kString,
     [](JobConfig& c, const toml::node& n) {
       return set_choice(c.job.on_nonfinite, n, kOnNonFinite);
     },
     [](const JobConfig& c) { return toml_quote(c.job.on_nonfinite); }},
    {"job.seed", "an integer >= 0", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       const auto v = integer_of(n);
       if (!v || *v < 0) return false;
       c.job.seed = static_cast<std::uint64_t>(*v);
       return true;
     },
     [](const JobConfig& c) { return std::to_string(c.job.seed); }},
    {"model.layers",
     "a non-empty array of non-empty layer specs, e.g. [\"dense:256\", \"relu\", \"dense:10\", "
     "\"softmax_cross_entropy\"] (configs/README.md lists every kind)",
     OverrideKind::kLayerList,
     [](JobConfig& c, const toml::node& n) {
       const auto* array = n.as_array();
       if (array == nullptr || array->empty()) return false;
       std::vector<std::string> layers;
       for (const toml::node& element : *array) {
         const auto* s = string_of(element);
         if (s == nullptr || s->empty()) return false;
         layers.push_back(*s);
       }
       // Each entry's syntax now, with the key and line; the list's order and the shapes when the
       // model is built (they depend on the data set's input shape).
       for (std::size_t i = 0; i < layers.size(); ++i) {
         try {
           (void)tasks::parse_layer_spec(layers[i]);
         } catch (const std::invalid_argument& e) {
           throw std::invalid_argument("model.layers[" + std::to_string(i) + "]: " + e.what());
         }
       }
       c.model.layers = std::move(layers);
       return true;
     },
     [](const JobConfig& c) {
       return print_array(c.model.layers, [](const std::string& v) { return toml_quote(v); });
     }},
    {"model.sync_batch_norm", "true or false", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) { return set_bool(c.model.sync_batch_norm, n); },
     [](const JobConfig& c) { return std::string(c.model.sync_batch_norm ? "true" : "false"); }},
    {"net.connect_timeout", "a number of seconds > 0", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       const auto v = number_of(n);
       if (!v || *v <= 0.0) return false;
       c.net.connect_timeout = *v;
       return true;
     },
     [](const JobConfig& c) { return toml_float(c.net.connect_timeout); }},
    {"net.handshake_timeout", "a number of seconds > 0", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       const auto v = number_of(n);
       if (!v || *v <= 0.0) return false;
       c.net.handshake_timeout = *v;
       return true;
     },
     [](const JobConfig& c) { return toml_float(c.net.handshake_timeout); }},
    {"net.max_frame_bytes", "an integer >= 1024 (bytes; the transport's least frame limit)",
     OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) { return set_size(c.net.max_frame_bytes, n, 1024); },
     [](const JobConfig& c) { return print_size(c.net.max_frame_bytes); }},
    {"net.max_send_rate", kSendRateExpected, OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       return set_optional_rate(c.net.max_send_rate, n, "unlimited");
     },
     [](const JobConfig& c) { return print_optional_rate(c.net.max_send_rate, "unlimited"); }},
    {"net.min_nodes",
     "\"majority\" or an integer >= 1 (live nodes a node needs to go on after "
     "peers failed)",
     OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       return set_optional_size(c.net.min_nodes, n, 1, "majority");
     },
     [](const JobConfig& c) { return print_optional_size(c.net.min_nodes, "majority"); }},
    {"net.peer_timeout", "a number of seconds >= 0 (0: no heartbeats)", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       const auto v = number_of(n);
       if (!v || *v < 0.0) return false;
       c.net.peer_timeout = *v;
       return true;
     },
     [](const JobConfig& c) { return toml_float(c.net.peer_timeout); }},
    {"net.port",
     "an integer in 1..65535 (the TCP port each node listens on when the peer list "
     "comes from SLURM)",
     OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       const auto v = integer_of(n);
       if (!v || *v < 1 || *v > 65535) return false;
       c.net.port = static_cast<std::uint16_t>(*v);
       return true;
     },
     [](const JobConfig& c) { return std::to_string(c.net.port); }},
    {"optimizer.algorithm", "one of sgd, adam, adamw", OverrideKind::kString,
     [](JobConfig& c, const toml::node& n) {
       return set_choice(c.optimizer.algorithm, n, kOptimizers);
     },
     [](const JobConfig& c) { return toml_quote(c.optimizer.algorithm); }},
    {"optimizer.batch_size", "an integer >= 1 (samples per iteration per node)",
     OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) { return set_size(c.optimizer.batch_size, n, 1); },
     [](const JobConfig& c) { return print_size(c.optimizer.batch_size); }},
    {"optimizer.beta1", "a number >= 0 and < 1", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) { return set_fraction(c.optimizer.beta1, n); },
     [](const JobConfig& c) { return toml_float(c.optimizer.beta1); }},
    {"optimizer.beta2", "a number >= 0 and < 1", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) { return set_fraction(c.optimizer.beta2, n); },
     [](const JobConfig& c) { return toml_float(c.optimizer.beta2); }},
    {"optimizer.eps", "a number > 0", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       const auto v = number_of(n);
       if (!v || *v <= 0.0) return false;
       c.optimizer.eps = *v;
       return true;
     },
     [](const JobConfig& c) { return toml_float(c.optimizer.eps); }},
    {"optimizer.lr", "a number > 0", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       const auto v = number_of(n);
       if (!v || *v <= 0.0) return false;
       c.optimizer.lr = *v;
       return true;
     },
     [](const JobConfig& c) { return toml_float(c.optimizer.lr); }},
    {"optimizer.momentum", "a number >= 0 and < 1", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) { return set_fraction(c.optimizer.momentum, n); },
     [](const JobConfig& c) { return toml_float(c.optimizer.momentum); }},
    {"optimizer.schedule", "one of constant, cosine", OverrideKind::kString,
     [](JobConfig& c, const toml::node& n) {
       return set_choice(c.optimizer.schedule, n, kLrSchedules);
     },
     [](const JobConfig& c) { return toml_quote(c.optimizer.schedule); }},
    {"optimizer.weight_decay", "a number >= 0", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       const auto v = number_of(n);
       if (!v || *v < 0.0) return false;
       c.optimizer.weight_decay = *v;
       return true;
     },
     [](const JobConfig& c) { return toml_float(c.optimizer.weight_decay); }},
    {"optimizer.weight_decay_exclude", "true or false", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       return set_bool(c.optimizer.weight_decay_exclude, n);
     },
     [](const JobConfig& c) {
       return std::string(c.optimizer.weight_decay_exclude ? "true" : "false");
     }},
    {"planner.alpha", "\"auto\" (measured) or a number of seconds > 0", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       return set_optional_positive(c.planner.alpha, n, "auto");
     },
     [](const JobConfig& c) { return print_optional_rate(c.planner.alpha, "auto"); }},
    {"planner.bandwidth", kBandwidthExpected, OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       return set_optional_rate(c.planner.bandwidth, n, "auto");
     },
     [](const JobConfig& c) { return print_optional_rate(c.planner.bandwidth, "auto"); }},
    {"planner.gemm_flops", "\"auto\" (measured) or a number of FLOP/s > 0", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       return set_optional_positive(c.planner.gemm_flops, n, "auto");
     },
     [](const JobConfig& c) { return print_optional_rate(c.planner.gemm_flops, "auto"); }},
    {"planner.message_overhead", "\"auto\" (measured) or a number of seconds >= 0",
     OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) {
       return set_optional_positive(c.planner.message_overhead, n, "auto", /*zero_allowed=*/true);
     },
     [](const JobConfig& c) { return print_optional_rate(c.planner.message_overhead, "auto"); }},
    {"planner.probe", "true or false", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) { return set_bool(c.planner.probe, n); },
     [](const JobConfig& c) { return std::string(c.planner.probe ? "true" : "false"); }},
    {"security.encrypt", "true or false", OverrideKind::kToml,
     [](JobConfig& c, const toml::node& n) { return set_bool(c.security.encrypt, n); },
     [](const JobConfig& c) { return std::string(c.security.encrypt ? "true" : "false"); }},
    {"security.secret_file", "a string: the path of the job secret's file, or \"\" (none)",
     OverrideKind::kString,
     [](JobConfig& c, const toml::node& n) { return set_string(c.security.secret_file, n); },
     [](const JobConfig& c) { return toml_quote(c.security.secret_file); }},
    {"sync.strategy", "a strategy", OverrideKind::kString,
     [](JobConfig& c, const toml::node& n) {
       // The registry's names (the registry is the one place that lists strategies).
       const std::vector<std::string> names = sync::strategy_names();
       const auto* s = string_of(n);
       if (s == nullptr || std::find(names.begin(), names.end(), *s) == names.end()) {
         std::string known;
         for (const std::string& name : names) known += (known.empty() ? "" : ", ") + name;
         throw std::invalid_argument("sync.strategy = " + detail::toml_value_text(n) +
                                     ": expected a strategy, one of " + known);
       }
       c.sync.strategy = *s;
       return true;
     },
     [](const JobConfig& c) { return toml_quote(c.sync.strategy); }},
}};

static_assert(std::is_sorted(kKeys.begin(), kKeys.end(),
                             [](const KeySpec& a, const KeySpec& b) { return a.key < b.key; }),
              "kKeys must stay sorted by key");

/// A TOML scalar as a value of a strategy's or scheme's own key; nullopt for other types (arrays,
/// tables, dates) and non-finite floats.
std::optional<sync::OptionValue> option_value(const toml::node& n) {
  if (const auto* v = n.as_boolean()) return v->get();
  if (const auto* v = n.as_integer()) return v->get();
  if (const auto* v = n.as_floating_point()) {
    if (std::isfinite(v->get())) return v->get();
    return std::nullopt;
  }
  if (const auto* v = n.as_string()) return v->get();
  return std::nullopt;
}

std::string option_text(const sync::OptionValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return toml_quote(v);
        } else if constexpr (std::is_same_v<T, double>) {
          return toml_float(v);
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else {
          return std::to_string(v);
        }
      },
      value);
}

/// The name of a [sync.<table>] key below "sync." ("ako.partitions").
std::string_view option_name(const KeySpec& spec) { return spec.key.substr(kOptionPrefix.size()); }

}  // namespace

const std::vector<KeySpec>& key_specs() {
  // Rebuilt when the registry holds more option tables (a scheme registered at run time); the
  // keys' text lives in `text` (a deque: it stays where it is), which only grows.
  static std::mutex mutex;
  static std::vector<KeySpec> specs;
  static std::deque<std::string> text;
  static std::size_t tables_seen = 0;
  const std::lock_guard lock(mutex);
  if (specs.empty() || sync::option_table_count() != tables_seen) {
    const std::vector<sync::OptionTable> tables = sync::option_tables();
    specs.assign(kKeys.begin(), kKeys.end());
    for (const sync::OptionTable& table : tables) {
      for (const sync::OptionKey& key : table.keys) {
        const std::string& name =
            text.emplace_back(std::string(kOptionPrefix) + table.name + "." + key.name);
        const std::string& expected = text.emplace_back(key.expected);
        specs.push_back({name, expected,
                         key.strings_only ? OverrideKind::kString : OverrideKind::kToml, nullptr,
                         nullptr});
      }
    }
    std::sort(specs.begin(), specs.end(),
              [](const KeySpec& a, const KeySpec& b) { return a.key < b.key; });
    tables_seen = tables.size();
  }
  return specs;
}

const KeySpec* find_key(std::string_view key) {
  const std::vector<KeySpec>& specs = key_specs();
  const auto it = std::lower_bound(specs.begin(), specs.end(), key,
                                   [](const KeySpec& s, std::string_view k) { return s.key < k; });
  return it != specs.end() && it->key == key ? &*it : nullptr;
}

bool is_table(std::string_view name) {
  const std::vector<KeySpec>& specs = key_specs();
  return !name.empty() && std::any_of(specs.begin(), specs.end(), [name](const KeySpec& s) {
    return s.key.size() > name.size() && s.key.starts_with(name) && s.key[name.size()] == '.';
  });
}

bool set_value(JobConfig& config, const KeySpec& spec, const toml::node& value) {
  if (spec.set != nullptr) return spec.set(config, value);
  const std::optional<sync::OptionValue> v = option_value(value);
  return v && config.sync.options.try_set(option_name(spec), *v);
}

std::string print_value(const JobConfig& config, const KeySpec& spec) {
  if (spec.print != nullptr) return spec.print(config);
  return option_text(config.sync.options.get(option_name(spec)));
}

}  // namespace gradmesh::app::detail
