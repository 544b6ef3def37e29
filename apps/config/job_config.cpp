#include "apps/config/job_config.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

#include <toml++/toml.h>
#include <zlib.h>

#include "apps/config/config_schema.h"
#include "engine/error.h"
#include "engine/key_value_text.h"

namespace gradmesh::app {
namespace {

using detail::KeySpec;

/// Where a value came from, for error messages: "configs/x.toml" (line known) or "--set".
struct Origin {
  std::string_view source;
  std::size_t line = 0;  // 0: unknown
};

std::string with_line(std::string message, const Origin& origin) {
  if (origin.line > 0) message += " (line " + std::to_string(origin.line) + ")";
  return message;
}

[[noreturn]] void unknown_key(std::string_view key, const Origin& origin) {
  std::string message = std::string(origin.source) + ": unknown key '" + std::string(key) + "'";
  const KeySpec* best = nullptr;
  std::size_t best_distance = 3;  // suggest only close matches
  for (const KeySpec& spec : detail::key_specs()) {
    const std::size_t d = edit_distance(key, spec.key);
    if (d < best_distance) {
      best_distance = d;
      best = &spec;
    }
  }
  if (best != nullptr) {
    message += ": did you mean '" + std::string(best->key) + "'?";
  } else {
    message += ": expected one of the keys listed in configs/README.md";
  }
  throw ConfigError(with_line(std::move(message), origin));
}

[[noreturn]] void bad_value(const KeySpec& spec, const toml::node& value, const Origin& origin) {
  throw ConfigError(with_line(std::string(origin.source) + ": " + std::string(spec.key) + " = " +
                                  detail::toml_value_text(value) + ": expected " +
                                  std::string(spec.expected),
                              origin));
}

void set_key(JobConfig& config, const KeySpec& spec, const toml::node& value,
             const Origin& origin) {
  bool valid = false;
  try {
    valid = detail::set_value(config, spec, value);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(with_line(std::string(origin.source) + ": " + e.what(), origin));
  }
  if (!valid) bad_value(spec, value, origin);
}

/// Applies every key of `table` (whose dotted name is `prefix`) to `config`.
void apply_table(JobConfig& config, const toml::table& table, const std::string& prefix,
                 std::string_view source) {
  for (const auto& [name, value] : table) {
    const std::string key =
        prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
    const Origin origin{source, value.source().begin.line};
    if (const KeySpec* spec = detail::find_key(key)) {
      set_key(config, *spec, value, origin);
    } else if (detail::is_table(key)) {
      const auto* sub = value.as_table();
      if (sub == nullptr) {
        throw ConfigError(with_line(std::string(source) + ": " + key + " = " +
                                        detail::toml_value_text(value) + ": expected a table [" +
                                        key + "] of keys",
                                    origin));
      }
      apply_table(config, *sub, key, source);
    } else {
      unknown_key(key, origin);
    }
  }
}

toml::table parse_toml(std::string_view text, std::string_view source_name) {
  try {
    return toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw ConfigError(std::string(source_name) + ":" + std::to_string(where.line) + ":" +
                      std::to_string(where.column) +
                      ": TOML syntax error: " + std::string(e.description()));
  }
}

/// Splits a bare "a, b,c" list into trimmed items (empty items kept, so they are reported).
toml::array split_list(std::string_view text) {
  toml::array out;
  while (true) {
    const std::size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    out.push_back(std::string(item));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

/// The TOML value that `--set KEY=VALUE` gives `spec`: VALUE as TOML if it is one (and of a type
/// the key can take), else VALUE as a bare string.
toml::table override_value(const KeySpec& spec, std::string_view value) {
  toml::table holder;
  bool parsed = false;
  try {
    toml::table t = toml::parse("v = " + std::string(value), std::string_view("--set"));
    if (t.size() == 1 && t.contains("v")) {
      const toml::node& v = *t.get("v");
      const bool fits = spec.override_kind != detail::OverrideKind::kString || v.is_string();
      if (fits) {
        holder = std::move(t);
        parsed = true;
      }
    }
  } catch (const toml::parse_error&) {
    // not TOML: a bare string
  }
  if (!parsed) holder.insert_or_assign("v", std::string(value));
  if (spec.override_kind == detail::OverrideKind::kLayerList && holder.get("v")->is_string()) {
    holder.insert_or_assign("v", split_list(holder.get("v")->as_string()->get()));
  }
  return holder;
}

void apply_override(JobConfig& config, std::string_view text) {
  const Origin origin{"--set", 0};
  const std::size_t eq = text.find('=');
  if (eq == std::string_view::npos) {
    throw ConfigError("--set " + std::string(text) +
                      ": expected KEY=VALUE, e.g. --set optimizer.lr=0.01");
  }
  std::string_view key = text.substr(0, eq);
  while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  const KeySpec* spec = detail::find_key(key);
  if (spec == nullptr) {
    if (detail::is_table(key)) {
      throw ConfigError("--set: '" + std::string(key) +
                        "' is a table: expected a key inside it, e.g. --set " + std::string(key) +
                        ".KEY=VALUE");
    }
    unknown_key(key, origin);
  }
  const toml::table holder = override_value(*spec, text.substr(eq + 1));
  set_key(config, *spec, *holder.get("v"), origin);
}

}  // namespace

JobConfig parse_job_config(std::string_view toml_text, std::string_view source_name,
                           const std::vector<std::string>& overrides) {
  const toml::table table = parse_toml(toml_text, source_name);
  JobConfig config;
  apply_table(config, table, "", source_name);
  for (const std::string& o : overrides) apply_override(config, o);
  if (config.model.layers.empty()) {
    throw ConfigError(std::string(source_name) + ": model.layers is missing: expected " +
                      std::string(detail::find_key("model.layers")->expected));
  }
  return config;
}

JobConfig load_job_config(const std::filesystem::path& path,
                          const std::vector<std::string>& overrides) {
  std::error_code dir_ec;
  if (std::filesystem::is_directory(path, dir_ec)) {
    throw ConfigError("job config '" + path.string() +
                      "': is a directory: expected a TOML file (see configs/README.md)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    const bool exists = std::filesystem::exists(path, ec);
    throw ConfigError("job config '" + path.string() +
                      "': " + (exists ? "cannot be read" : "no such file") +
                      ": expected a readable TOML file (see configs/README.md)");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError("job config '" + path.string() + "': read error");
  try {
    return parse_job_config(text.str(), path.string(), overrides);
  } catch (const ConfigError& e) {
    // An override's error names "--set", a cross-key check neither: name the job's file too, as
    // before a node knows its rank the config is what tells a launcher's nodes apart.
    const std::string what = e.what();
    if (what.find(path.string()) != std::string::npos) throw;
    throw ConfigError("job config '" + path.string() + "': " + what);
  }
}

std::string JobConfig::canonical_text() const {
  // table name -> (leaf -> value); std::map sorts both, and "sync" sorts before "sync.ako".
  std::map<std::string, std::map<std::string, std::string>> tables;
  for (const KeySpec& spec : detail::key_specs()) {
    const std::size_t dot = spec.key.rfind('.');
    tables[std::string(spec.key.substr(0, dot))][std::string(spec.key.substr(dot + 1))] =
        detail::print_value(*this, spec);
  }
  std::string out;
  for (const auto& [table, keys] : tables) {
    if (!out.empty()) out += "\n";
    out += "[" + table + "]\n";
    for (const auto& [leaf, value] : keys) out += leaf + " = " + value + "\n";
  }
  return out;
}

namespace {

/// Two zlib crc32s, of `text` and of its reverse.
std::uint64_t fingerprint(const std::string& text) {
  const std::string reversed(text.rbegin(), text.rend());
  auto crc = [](const std::string& s) {
    const uLong start = crc32(0L, Z_NULL, 0);
    return static_cast<std::uint64_t>(
        crc32(start, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
  };
  return (crc(text) << 32) | crc(reversed);
}

/// Keys (or tables, ending in '.') that do not shape the training trajectory.
constexpr std::string_view kNotTraining[] = {
    "checkpoint.",     "compute.cpu_kernels", "compute.threads",
    "data.test_limit", "job.epochs",          "job.max_iterations",
    "job.name",        "job.on_nonfinite",    "net.",
    "security."};

}  // namespace

std::uint64_t JobConfig::hash() const { return fingerprint(canonical_text()); }

std::string JobConfig::key_text(bool training_only) const {
  std::string out;
  for (const KeySpec& spec : detail::key_specs()) {
    const bool excluded =
        training_only &&
        std::any_of(std::begin(kNotTraining), std::end(kNotTraining), [&spec](std::string_view k) {
          return k.ends_with('.') ? spec.key.starts_with(k) : spec.key == k;
        });
    if (!excluded) out += std::string(spec.key) + " = " + detail::print_value(*this, spec) + "\n";
  }
  return out;
}

std::string JobConfig::training_text() const { return key_text(/*training_only=*/true); }

std::uint64_t JobConfig::training_fingerprint() const { return fingerprint(training_text()); }

}  // namespace gradmesh::app
