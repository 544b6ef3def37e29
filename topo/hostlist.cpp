#include "topo/hostlist.h"

#include <charconv>
#include <cstdint>

#include "engine/error.h"

namespace gradmesh::topo {

namespace {

constexpr std::string_view kExpected =
    "expected NAME or NAME[RANGES], comma-separated, RANGES like 01-03,07";

/// Parses one SLURM host list; every error names the list and the position of the fault.
class HostlistParser {
 public:
  HostlistParser(std::string_view list, std::string_view what) : list_(list), what_(what) {}

  std::vector<std::string> expand() {
    if (list_.empty()) fail(0, "the list is empty");
    std::vector<std::string> hosts;
    std::size_t start = 0;
    while (true) {
      const std::size_t end = entry_end(start);
      if (end == start) fail(start, "empty entry");
      expand_entry(start, end, hosts);
      if (end == list_.size()) break;
      start = end + 1;  // past the comma
      if (start == list_.size()) fail(start, "empty entry after the last ','");
    }
    return hosts;
  }

 private:
  /// One bracket group's numbers, as text of the right width.
  using Group = std::vector<std::string>;

  [[noreturn]] void fail(std::size_t position, const std::string& why) const {
    throw ConfigError(std::string(what_) + "='" + std::string(list_) + "': " + why +
                      " at position " + std::to_string(position) + " (" + std::string(kExpected) +
                      ")");
  }

  /// The end of the entry starting at `start`: the next comma outside brackets, or the end.
  std::size_t entry_end(std::size_t start) const {
    bool open = false;
    std::size_t i = start;
    for (; i < list_.size(); ++i) {
      const char c = list_[i];
      if (c == '[') {
        if (open) fail(i, "'[' inside a bracket group");
        open = true;
      } else if (c == ']') {
        if (!open) fail(i, "']' without a '['");
        open = false;
      } else if (c == ',' && !open) {
        break;
      } else if (c == ' ' || c == '\t' || c == '\n') {
        fail(i, "white space");
      }
    }
    if (open) fail(list_.rfind('[', i - 1), "'[' never closed");
    return i;
  }

  /// Appends the names of the entry list_[start, end) to `hosts`.
  void expand_entry(std::size_t start, std::size_t end, std::vector<std::string>& hosts) {
    // The entry as literal pieces with bracket groups between them: piece0 [g0] piece1 [g1] ...
    std::vector<std::string_view> pieces;
    std::vector<Group> groups;
    std::size_t literal = start;
    for (std::size_t i = start; i < end; ++i) {
      if (list_[i] != '[') continue;
      pieces.push_back(list_.substr(literal, i - literal));
      const std::size_t close = list_.find(']', i);  // exists: entry_end checked
      groups.push_back(parse_group(i + 1, close));
      literal = close + 1;
      i = close;
    }
    pieces.push_back(list_.substr(literal, end - literal));

    std::size_t count = 1;
    for (const Group& g : groups) {
      count *= g.size();
      if (count + hosts.size() > kMaxHostlistHosts) {
        fail(start, "expands to more than " + std::to_string(kMaxHostlistHosts) + " hosts");
      }
    }
    // Odometer over the groups, the last one fastest.
    std::vector<std::size_t> digit(groups.size(), 0);
    for (std::size_t n = 0; n < count; ++n) {
      std::string name(pieces[0]);
      for (std::size_t g = 0; g < groups.size(); ++g) {
        name += groups[g][digit[g]];
        name += pieces[g + 1];
      }
      hosts.push_back(std::move(name));
      for (std::size_t g = groups.size(); g-- > 0;) {
        if (++digit[g] < groups[g].size()) break;
        digit[g] = 0;
      }
    }
  }

  /// The numbers of the group list_[start, end) ("01-03,07"), each padded to its range's width.
  Group parse_group(std::size_t start, std::size_t end) const {
    if (start == end) fail(start, "empty bracket group '[]'");
    Group numbers;
    std::size_t item = start;
    while (item <= end) {
      std::size_t comma = list_.find(',', item);
      if (comma == std::string_view::npos || comma > end) comma = end;
      const std::string_view text = list_.substr(item, comma - item);
      const std::size_t dash = text.find('-');
      const std::string_view low = text.substr(0, dash);
      const std::string_view high = dash == std::string_view::npos ? low : text.substr(dash + 1);
      const std::uint64_t from = number(low, item);
      const std::uint64_t to =
          number(high, dash == std::string_view::npos ? item : item + dash + 1);
      if (to < from) {
        fail(item, "range '" + std::string(text) + "' ends below its start");
      }
      if (to - from >= kMaxHostlistHosts) {
        fail(item, "range '" + std::string(text) + "' has more than " +
                       std::to_string(kMaxHostlistHosts) + " numbers");
      }
      for (std::uint64_t v = from; v <= to; ++v) {
        std::string digits = std::to_string(v);
        if (digits.size() < low.size()) digits.insert(0, low.size() - digits.size(), '0');
        numbers.push_back(std::move(digits));
      }
      item = comma + 1;
    }
    return numbers;
  }

  /// A range bound: decimal digits only, at list_ position `position` (for errors).
  std::uint64_t number(std::string_view text, std::size_t position) const {
    if (text.empty()) fail(position, "a range bound is missing");
    std::uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || ptr != text.data() + text.size()) {
      fail(position, "'" + std::string(text) + "' is not a number of decimal digits");
    }
    return value;
  }

  std::string_view list_;
  std::string_view what_;
};

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view list, std::string_view what) {
  return HostlistParser(list, what).expand();
}

}  // namespace gradmesh::topo
