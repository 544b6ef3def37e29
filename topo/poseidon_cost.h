#pragma once
// Poseidon's communication cost model and BestScheme (Poseidon ATC'17 sec. 3.2, Table 1;
// sec. 4.1, Algorithm 1): per layer, the cheaper of a parameter server and sufficient-factor
// broadcasting, counted in floats sent per node per iteration.

#include <cstddef>
#include <string_view>

namespace gradmesh::topo {

/// How a layer's update is synchronised.
enum class Scheme : unsigned char {
  kPs,   ///< push gradient chunks to KV shards, pull updated parameters (Poseidon sec. 2.1, PS)
  kSfb,  ///< broadcast sufficient factors (u, v) to every peer (Poseidon sec. 2.1, SFB)
};

/// "PS" or "SFB".
[[nodiscard]] std::string_view to_string(Scheme scheme) noexcept;

/// Floats a node that is both worker and server sends and receives per iteration for an M x N
/// fully-connected layer under PS: 2MN(P1 + P2 - 2)/P2 (Table 1, "Server & Worker"), with P1
/// workers and P2 servers. P2 == 0 gives 0.
[[nodiscard]] double ps_floats(std::size_t m, std::size_t n, std::size_t p1,
                               std::size_t p2) noexcept;

/// Floats a worker sends and receives per iteration for an M x N layer under SFB with per-worker
/// batch K: 2K(P1 - 1)(M + N) (Table 1, "Worker").
[[nodiscard]] double sfb_floats(std::size_t k, std::size_t m, std::size_t n,
                                std::size_t p1) noexcept;

/// Algorithm 1 (BestScheme): SFB for a fully-connected layer when
/// 2K(P1 - 1)(M + N) <= 2MN(P1 + P2 - 2)/P2, else PS; every other layer PS.
[[nodiscard]] Scheme best_scheme(bool fully_connected, std::size_t m, std::size_t n, std::size_t k,
                                 std::size_t p1, std::size_t p2) noexcept;

}  // namespace gradmesh::topo
