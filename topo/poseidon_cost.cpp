#include "topo/poseidon_cost.h"

namespace gradmesh::topo {

std::string_view to_string(Scheme scheme) noexcept { return scheme == Scheme::kSfb ? "SFB" : "PS"; }

double ps_floats(std::size_t m, std::size_t n, std::size_t p1, std::size_t p2) noexcept {
  if (p2 == 0) return 0.0;
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) *
         (static_cast<double>(p1) + static_cast<double>(p2) - 2.0) / static_cast<double>(p2);
}

double sfb_floats(std::size_t k, std::size_t m, std::size_t n, std::size_t p1) noexcept {
  if (p1 == 0) return 0.0;
  return 2.0 * static_cast<double>(k) * (static_cast<double>(p1) - 1.0) *
         (static_cast<double>(m) + static_cast<double>(n));
}

Scheme best_scheme(bool fully_connected, std::size_t m, std::size_t n, std::size_t k,
                   std::size_t p1, std::size_t p2) noexcept {
  if (fully_connected && sfb_floats(k, m, n, p1) <= ps_floats(m, n, p1, p2)) return Scheme::kSfb;
  return Scheme::kPs;
}

}  // namespace gradmesh::topo
