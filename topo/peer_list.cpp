#include "topo/peer_list.h"

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <set>

#include "engine/error.h"

namespace gradmesh::topo {

namespace {

Peer parse_peer(std::string_view entry, const std::string& where) {
  const auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
      s.remove_suffix(1);
    return s;
  };
  entry = trim(entry);
  const auto colon = entry.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == entry.size()) {
    throw ConfigError(where + " '" + std::string(entry) + "' is not HOST:PORT");
  }
  unsigned port = 0;
  const std::string_view port_text = entry.substr(colon + 1);
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 ||
      port > 65535) {
    throw ConfigError(where + " '" + std::string(entry) + "': port must be a number in 1..65535");
  }
  return Peer{std::string(entry.substr(0, colon)), static_cast<std::uint16_t>(port)};
}

}  // namespace

PeerList::PeerList(std::vector<Peer> peers) : peers_(std::move(peers)) {
  if (peers_.empty()) throw ConfigError("peer list is empty: expected at least one HOST:PORT");
  std::set<std::string> seen;
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i].port == 0) {
      throw ConfigError("peer list entry " + std::to_string(i) + " has port 0");
    }
    if (!seen.insert(peers_[i].address()).second) {
      throw ConfigError("peer list names " + peers_[i].address() + " twice (entry " +
                        std::to_string(i) + "): every node needs its own HOST:PORT");
    }
  }
}

PeerList PeerList::parse(std::string_view text) {
  std::vector<Peer> peers;
  std::size_t index = 0;
  while (true) {
    const auto comma = text.find(',');
    peers.push_back(parse_peer(text.substr(0, comma), "--peers: entry " + std::to_string(index)));
    ++index;
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return PeerList(std::move(peers));
}

PeerList PeerList::from_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("--peers-file: cannot read " + path.string());
  std::vector<Peer> peers;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    peers.push_back(parse_peer(line, path.string() + ":" + std::to_string(number) + ":"));
  }
  if (peers.empty()) throw ConfigError("--peers-file: " + path.string() + " lists no peers");
  return PeerList(std::move(peers));
}

std::size_t PeerList::count_on_host(std::string_view host) const {
  std::size_t count = 0;
  for (const Peer& p : peers_) count += p.host == host ? 1 : 0;
  return count;
}

std::string PeerList::to_string() const {
  std::string out;
  for (const Peer& p : peers_) {
    if (!out.empty()) out += ',';
    out += p.address();
  }
  return out;
}

EnvLookup process_environment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
  };
}

RankChoice resolve_rank(std::optional<long long> cli_rank, const EnvLookup& env,
                        std::size_t nodes) {
  return resolve_rank(cli_rank, env, nodes,
                      {"GRADMESH_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "RANK"});
}

RankChoice resolve_rank(std::optional<long long> cli_rank, const EnvLookup& env, std::size_t nodes,
                        std::initializer_list<const char*> variables) {
  RankChoice choice;
  long long value = -1;
  if (cli_rank) {
    value = *cli_rank;
    choice.source = "--rank";
  } else {
    for (const char* name : variables) {
      const auto text = env(name);
      if (!text) continue;
      const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
      if (ec != std::errc() || end != text->data() + text->size()) {
        throw ConfigError(std::string(name) + "='" + *text +
                          "': expected a rank (an integer >= 0)");
      }
      choice.source = name;
      break;
    }
    if (choice.source.empty()) {
      // "GRADMESH_RANK (or SLURM_PROCID, OMPI_COMM_WORLD_RANK, RANK)"
      std::string names = *variables.begin();
      for (auto it = variables.begin() + 1; it != variables.end(); ++it) {
        names += (it == variables.begin() + 1 ? " (or " : ", ") + std::string(*it);
      }
      if (variables.size() > 1) names += ")";
      throw ConfigError("no rank: pass --rank R or set " + names);
    }
  }
  if (value < 0 || static_cast<unsigned long long>(value) >= nodes) {
    throw ConfigError(choice.source + " = " + std::to_string(value) + ": expected a rank in 0.." +
                      std::to_string(nodes - 1) + " (the peer list has " + std::to_string(nodes) +
                      " entries)");
  }
  choice.rank = static_cast<std::size_t>(value);
  return choice;
}

}  // namespace gradmesh::topo
