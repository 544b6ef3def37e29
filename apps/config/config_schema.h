#pragma once
// Internal to gradmesh_config: the schema of the job config, one entry per key.
//
// The schema is the single list of keys: parse_job_config() sets fields through it,
// canonical_text() prints through it, and configs/README.md documents the same list (a test
// checks that every key here appears there).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "apps/config/job_config.h"

namespace gradmesh::app::detail {

/// How a `--set KEY=VALUE` value is read for a key (see parse_job_config()).
enum class OverrideKind {
  kToml,       ///< VALUE as TOML; a bare string if it is not TOML.
  kString,     ///< the key takes only strings: VALUE as TOML only if it is a TOML string.
  kLayerList,  ///< model.layers: a TOML array, or a bare comma-separated list.
};

/// One key of the job config. The keys of the strategies' and schemes' own tables
/// ([sync.<table>], sync/option_table.h) have no `set` or `print`: set_value() and print_value()
/// go through the registry's declaration of the key.
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

/// Every key, sorted by name: the job config's own, and those of every option table the sync
/// registry holds. The reference (and pointers into it) stay valid until a scheme with an option
/// table is registered (sync::register_scheme()). Thread-safe.
[[nodiscard]] const std::vector<KeySpec>& key_specs();

/// The spec of `key`, or nullptr if the schema has no such key. Valid as key_specs().
[[nodiscard]] const KeySpec* find_key(std::string_view key);

/// True if `name` is a table of the schema ("sync", "sync.ako"), i.e. a proper prefix of keys.
[[nodiscard]] bool is_table(std::string_view name);

/// Stores `value` for `spec`'s key into `config`, as KeySpec::set promises (for a key of a
/// strategy's or scheme's own table: through its declaration).
bool set_value(JobConfig& config, const KeySpec& spec, const toml::node& value);

/// `spec`'s key's current value in `config` as a TOML value (canonical form), as KeySpec::print.
[[nodiscard]] std::string print_value(const JobConfig& config, const KeySpec& spec);

/// `text` as a TOML basic string, quoted and escaped.
[[nodiscard]] std::string toml_quote(std::string_view text);

/// `value` as a TOML float in its shortest round-trip form ("0.05", "30.0", "1e+30").
[[nodiscard]] std::string toml_float(double value);

/// A parsed TOML value as TOML text, strings double-quoted (for error messages).
[[nodiscard]] std::string toml_value_text(const toml::node& value);

}  // namespace gradmesh::app::detail
