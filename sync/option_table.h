#pragma once
// The strategies' and schemes' own config tables, [sync.<table>] (issue 27): each strategy or
// scheme declares its keys in its own folder (what a valid value is, its default, its canonical
// form) and hands the table to the registry (StrategyTraits-side in sync/registry.cpp, or its
// SchemeEntry); the job config parses, checks and prints those keys through the declarations,
// naming none of them. A new option touches its strategy's folder and configs/README.md only.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace gradmesh::sync {

/// A value of a key of an option table: TOML's scalars (a boolean, an integer, a finite float, a
/// string).
using OptionValue = std::variant<bool, std::int64_t, double, std::string>;

/// One key of an option table.
struct OptionKey {
  std::string name;      ///< within its table, e.g. "partitions" (sync.ako.partitions)
  std::string expected;  ///< what a valid value is, for errors: "\"auto\" or an integer >= 1"
  /// The key takes strings only (a choice): `--set KEY=VALUE` reads VALUE as TOML only when it is
  /// a TOML string, else as a bare string.
  bool strings_only = false;
  OptionValue default_value;  ///< in canonical form
  /// `value` in canonical form (a rate string as a float of bytes/s, a whole number given for a
  /// float as that float), or nullopt when it is not valid. May throw std::invalid_argument with
  /// a more precise message naming the key. Never empty.
  std::function<std::optional<OptionValue>(const OptionValue& value)> canonical;
};

/// A strategy's or scheme's own config table, [sync.<name>].
struct OptionTable {
  std::string name;             ///< e.g. "ako": its keys are sync.ako.*; "" = no table
  std::vector<OptionKey> keys;  ///< names unique within the table
};

/// Key makers for the usual kinds of values (each key's `canonical`).
/// One of `choices` (strings only); the default is the first.
[[nodiscard]] OptionKey choice_key(std::string name, std::vector<std::string> choices);
/// true or false; default `default_value`.
[[nodiscard]] OptionKey flag_key(std::string name, bool default_value);
/// An integer >= `min`; default `default_value`. `unit` ends `expected` ("iterations").
[[nodiscard]] OptionKey integer_key(std::string name, std::int64_t min, std::int64_t default_value,
                                    std::string_view unit);
/// A number in (0, 1] (an integer 1 reads as 1.0); default `default_value`. `what` ends
/// `expected` ("the share of entries kept").
[[nodiscard]] OptionKey fraction_key(std::string name, double default_value, std::string_view what);
/// The string `word` (the default, e.g. "auto") or an integer >= `min` that `also` accepts (no
/// further condition when empty); `expected` says what a valid value is.
[[nodiscard]] OptionKey word_or_integer_key(std::string name, std::string word, std::int64_t min,
                                            std::string expected,
                                            std::function<bool(std::int64_t)> also = {});
/// The string `word` (the default, e.g. "auto") or a rate > 0: bytes/s as a number, or a string
/// topo::parse_rate reads ("100mbit"), kept as a float of bytes/s.
[[nodiscard]] OptionKey word_or_rate_key(std::string name, std::string word);

/// The values of option tables' keys, by their name below "sync." ("ako.partitions"); a key
/// never set reads as its default. Checked against the registry's tables (option_key()). Plain
/// value type; not thread-safe for writes.
class OptionValues {
 public:
  /// The value of `key`: as set, else its default. Throws ContractError for a key no table of
  /// the registry declares.
  [[nodiscard]] const OptionValue& get(std::string_view key) const;
  /// Sets `key` to `value`'s canonical form if it is valid and returns true; returns false (the
  /// value untouched) if not. Throws std::invalid_argument from the key's own check (naming the
  /// key), ContractError for an unknown key.
  bool try_set(std::string_view key, const OptionValue& value);
  /// try_set(), throwing std::invalid_argument "sync.<key> = <value>: expected <expected>" when
  /// `value` is not valid.
  void set(std::string_view key, const OptionValue& value);

  /// get(key) as a boolean, an integer, a number (an integer or a float), a string, or whether
  /// it is the string `word` ("auto"). The typed readers throw ContractError when the value is of
  /// another type (a table's key makers fix each key's types).
  [[nodiscard]] bool flag(std::string_view key) const;
  [[nodiscard]] std::int64_t integer(std::string_view key) const;
  [[nodiscard]] double number(std::string_view key) const;
  [[nodiscard]] const std::string& text(std::string_view key) const;
  [[nodiscard]] bool is(std::string_view key, std::string_view word) const;

  /// Equal when every key either holds reads the same (a key set to its default equals one not
  /// set).
  friend bool operator==(const OptionValues& a, const OptionValues& b);

 private:
  std::map<std::string, OptionValue, std::less<>> values_;
};

/// Every option table the registry holds: the built-in strategies' and schemes', then those of
/// schemes added by register_scheme(), each once, by name. Thread-safe.
[[nodiscard]] std::vector<OptionTable> option_tables();

/// How many option tables the registry holds (it only grows: register_scheme()), so that a
/// reader of option_tables() knows, without copying them, whether its copy is current. Thread-safe.
[[nodiscard]] std::size_t option_table_count();

/// The declaration of `key` ("ako.partitions": table, dot, key), or nullptr when no table
/// declares it. The pointer stays valid until the process ends. Thread-safe.
[[nodiscard]] const OptionKey* find_option_key(std::string_view key);

}  // namespace gradmesh::sync
