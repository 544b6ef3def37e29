#include "engine/key_value_text.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <vector>

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

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace gradmesh
