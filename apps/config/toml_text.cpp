// TOML text of config values: strings quoted and escaped, floats that read back as floats, any
// node as the error messages and `gradmesh-node config` print it (config_schema.h, detail).
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "apps/config/config_schema.h"

namespace gradmesh::app::detail {

std::string toml_quote(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          std::array<char, 8> buf{};
          std::snprintf(buf.data(), buf.size(), "\\u%04x", static_cast<unsigned>(c));
          out += buf.data();
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string toml_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::array<char, 64> buf{};
  const auto result = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  std::string out(buf.data(), result.ptr);
  if (out.find_first_of(".e") == std::string::npos) out += ".0";
  return out;
}

std::string toml_value_text(const toml::node& value) {
  if (const auto* s = value.as_string()) return toml_quote(s->get());
  if (const auto* f = value.as_floating_point()) return toml_float(f->get());
  if (const auto* a = value.as_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < a->size(); ++i) {
      if (i > 0) out += ", ";
      out += toml_value_text((*a)[i]);
    }
    return out + "]";
  }
  if (const auto* t = value.as_table()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : *t) {
      out += first ? " " : ", ";
      first = false;
      out += std::string(k.str()) + " = " + toml_value_text(v);
    }
    return out + (first ? "}" : " }");
  }
  std::ostringstream out;
  value.visit([&out](const auto& v) { out << v; });
  return out.str();
}

}  // namespace gradmesh::app::detail
