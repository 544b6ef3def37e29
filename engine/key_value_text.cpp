#include "engine/key_value_text.h"

#include <map>
#include <sstream>

namespace gradmesh {

namespace {

std::map<std::string, std::string> parse_lines(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::size_t eq = line.find(" = ");
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

}  // namespace

std::string key_value_difference(const std::string& a, const std::string& b,
                                 std::string_view a_side, std::string_view b_side) {
  const auto ours = parse_lines(a), theirs = parse_lines(b);
  std::string out;
  const auto add = [&](const std::string& key, const std::string& in_a, const std::string& in_b) {
    out += (out.empty() ? "" : "; ") + key + " = " + in_a + " " + std::string(a_side) + ", " +
           in_b + " " + std::string(b_side);
  };
  for (const auto& [key, value] : ours) {
    const auto it = theirs.find(key);
    if (it == theirs.end())
      add(key, value, "no such key");
    else if (it->second != value)
      add(key, value, it->second);
  }
  for (const auto& [key, value] : theirs)
    if (!ours.contains(key)) add(key, "no such key", value);
  return out;
}

}  // namespace gradmesh
