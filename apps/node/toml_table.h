#pragma once
// Reading a hand-editable TOML file of gradmesh-node's (device profiles, links files): every error
// names the file, the table and the line.

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include <toml++/toml.h>

#include "engine/error.h"
#include "topo/rate.h"

namespace gradmesh::app::detail {

/// Reads one table's keys, naming the file, table and line in every error.
class TableReader {
 public:
  TableReader(const std::filesystem::path& path, const toml::table& table, std::string where)
      : path_(path), table_(table), where_(std::move(where)) {}

  [[nodiscard]] const toml::node& node(const std::string& key) const {
    const toml::node* n = table_.get(key);
    if (n == nullptr) {
      throw ConfigError(path_.string() + ": " + where_ + " (line " +
                        std::to_string(table_.source().begin.line) + ") has no key " + key);
    }
    return *n;
  }
  [[nodiscard]] bool has(const std::string& key) const { return table_.get(key) != nullptr; }

  /// A finite number >= `min` (> 0 when `positive`); an integer reads as a float.
  [[nodiscard]] double number(const std::string& key, bool positive = false) const {
    const toml::node& n = node(key);
    std::optional<double> v;
    if (const auto* f = n.as_floating_point()) v = f->get();
    if (const auto* i = n.as_integer()) v = static_cast<double>(i->get());
    if (!v || !std::isfinite(*v) || *v < 0 || (positive && *v == 0)) {
      throw bad(key, n, positive ? "a finite number > 0" : "a finite number >= 0");
    }
    return *v;
  }
  [[nodiscard]] std::int64_t integer(const std::string& key, std::int64_t min) const {
    const toml::node& n = node(key);
    const auto* i = n.as_integer();
    if (i == nullptr || i->get() < min) throw bad(key, n, "an integer >= " + std::to_string(min));
    return i->get();
  }
  [[nodiscard]] std::string text(const std::string& key) const {
    const toml::node& n = node(key);
    const auto* s = n.as_string();
    if (s == nullptr) throw bad(key, n, "a string");
    return s->get();
  }
  /// A rate as the config's (topo::parse_rate: "1gbit", "125MB", ...), bytes/s.
  [[nodiscard]] double rate(const std::string& key) const {
    const toml::node& n = node(key);
    const auto* s = n.as_string();
    if (s != nullptr) {
      try {
        return topo::parse_rate(s->get());
      } catch (const std::invalid_argument& e) {
        throw bad(key, n, std::string("a rate (") + e.what() + ")");
      }
    }
    throw bad(key, n, "a rate such as \"1gbit\" or \"125MB\"");
  }
  [[nodiscard]] ConfigError bad(const std::string& key, const toml::node& n,
                                const std::string& expected) const {
    std::ostringstream value;
    n.visit([&value](const auto& v) { value << v; });
    return ConfigError(path_.string() + ": " + where_ + " " + key + " = " + value.str() +
                       ": expected " + expected + " (line " +
                       std::to_string(n.source().begin.line) + ")");
  }

 private:
  const std::filesystem::path& path_;
  const toml::table& table_;
  std::string where_;
};

/// Parses `path` as TOML; a syntax error is a ConfigError naming the file, `what` it should be
/// ("a links file") and the line.
[[nodiscard]] inline toml::table parse_toml_file(const std::filesystem::path& path,
                                                 const std::string& what) {
  try {
    return toml::parse_file(path.string());
  } catch (const toml::parse_error& e) {
    throw ConfigError(path.string() + ": not " + what + ": " + std::string(e.description()) +
                      " (line " + std::to_string(e.source().begin.line) + ")");
  }
}

/// `entry` of an array of tables as a table; else a ConfigError naming the file, `where` ("[[site]]
/// 2") and the line.
[[nodiscard]] inline const toml::table& table_entry(const std::filesystem::path& path,
                                                    const toml::node& entry,
                                                    const std::string& where) {
  const toml::table* table = entry.as_table();
  if (table == nullptr) {
    throw ConfigError(path.string() + ": " + where + " is not a table (line " +
                      std::to_string(entry.source().begin.line) + ")");
  }
  return *table;
}

}  // namespace gradmesh::app::detail
