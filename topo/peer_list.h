#pragma once
// The cluster as every node sees it: the ordered peer list (rank = position) and this node's rank.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gradmesh::topo {

/// One node of the job: where its transport listens.
struct Peer {
  std::string host;
  std::uint16_t port = 0;
  /// "host:port".
  [[nodiscard]] std::string address() const { return host + ":" + std::to_string(port); }
  friend bool operator==(const Peer&, const Peer&) = default;
};

/// The ordered list of every node of a job, this one included; a node's rank is its index.
/// Every node must be started with the same list (the handshake checks it).
class PeerList {
 public:
  PeerList() = default;
  explicit PeerList(std::vector<Peer> peers);  ///< throws ConfigError on duplicates or port 0

  /// Parses "HOST:PORT,HOST:PORT,...". Throws ConfigError naming the bad entry and the expected
  /// form (e.g. "--peers: entry 2 '10.0.0.3' is not HOST:PORT").
  static PeerList parse(std::string_view text);
  /// Reads one HOST:PORT per line ('#' starts a comment; blank lines ignored). Throws ConfigError
  /// naming the file (and line) if it is missing or malformed.
  static PeerList from_file(const std::filesystem::path& path);

  [[nodiscard]] std::size_t size() const noexcept { return peers_.size(); }
  [[nodiscard]] const Peer& operator[](std::size_t rank) const { return peers_.at(rank); }
  [[nodiscard]] const std::vector<Peer>& peers() const noexcept { return peers_; }
  /// How many peers share `host` (used to split this machine's cores among local nodes).
  [[nodiscard]] std::size_t count_on_host(std::string_view host) const;
  /// "HOST:PORT,HOST:PORT,...", the form parse() reads.
  [[nodiscard]] std::string to_string() const;

 private:
  std::vector<Peer> peers_;
};

/// Where a node's rank came from, for the start-up message.
struct RankChoice {
  std::size_t rank = 0;
  std::string
      source;  ///< "--rank", "GRADMESH_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK" or "RANK"
};

/// Looks up an environment variable (injected so nothing deep in the code reads the environment).
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

/// The process environment as an EnvLookup (for main()).
[[nodiscard]] EnvLookup process_environment();

/// Resolves this node's rank: `--rank` if given, else GRADMESH_RANK, SLURM_PROCID,
/// OMPI_COMM_WORLD_RANK, RANK, in that order (DESIGN.md, "Run a node"). Throws ConfigError if none
/// is set, a value is not a number, or the rank is not < `nodes`.
[[nodiscard]] RankChoice resolve_rank(std::optional<long long> cli_rank, const EnvLookup& env,
                                      std::size_t nodes);

/// The same with the environment variables `variables` (tried in order) in place of the default
/// list, e.g. {"SLURM_PROCID"} when the peers came from SLURM. `variables` must not be empty.
[[nodiscard]] RankChoice resolve_rank(std::optional<long long> cli_rank, const EnvLookup& env,
                                      std::size_t nodes,
                                      std::initializer_list<const char*> variables);

}  // namespace gradmesh::topo
