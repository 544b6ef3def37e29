#pragma once
// Internal to gradmesh_config: the schema of the job config, one entry per key.
//
// The schema is the single list of keys: parse_job_config() sets fields through it,
// canonical_text() prints through it, and configs/README.md documents the same list (a test
// checks that every key here appears there).

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "apps/config/job_config.h"

namespace gradmesh::app::detail {

/// How a `--set KEY=VALUE` value is read for a key (see parse_job_config()).
enum class OverrideKind {
  kToml,       ///< VALUE as TOML; a bare string if it is not TOML.
  kString,     ///< the key takes only strings: VALUE as TOML only if it is a TOML string.
  kLayerList,  ///< model.layers: a TOML array, or a bare comma-separated list.
};

/// One key of the job config.
struct KeySpec {
  std::string_view key;       ///< dotted name, e.g. "optimizer.lr"
  std::string_view expected;  ///< what a valid value is, for error messages ("a number > 0")
  OverrideKind override_kind;
  /// Stores `value` into the config; returns false (config untouched) if it is not valid, or
  /// throws std::invalid_argument (config untouched) whose message names the key and says more
  /// precisely what was wrong (model.layers: which entry, and what its kind expects).
  bool (*set)(JobConfig& config, const toml::node& value);
  /// The key's current value in `config` as a TOML value (canonical form).
  std::string (*print)(const JobConfig& config);
};

/// Every key, sorted by name.
[[nodiscard]] std::span<const KeySpec> key_specs() noexcept;

/// The spec of `key`, or nullptr if the schema has no such key.
[[nodiscard]] const KeySpec* find_key(std::string_view key) noexcept;

/// True if `name` is a table of the schema ("sync", "sync.ako"), i.e. a proper prefix of keys.
[[nodiscard]] bool is_table(std::string_view name) noexcept;

/// `text` as a TOML basic string, quoted and escaped.
[[nodiscard]] std::string toml_quote(std::string_view text);

/// `value` as a TOML float in its shortest round-trip form ("0.05", "30.0", "1e+30").
[[nodiscard]] std::string toml_float(double value);

/// A parsed TOML value as TOML text, strings double-quoted (for error messages).
[[nodiscard]] std::string toml_value_text(const toml::node& value);

}  // namespace gradmesh::app::detail
