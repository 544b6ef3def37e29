#pragma once
// Links files (issue 58, item 2): `gradmesh-node simulate --links FILE` predicts a job on sites
// of hosts, each site's hosts joined by their own links and the sites joined by one uplink each
// (8 sites joined by 1 Gbit/s, 16 hosts on 10 GbE in each), what the start-up probe would have
// measured taken as given. TOML, so that a person can write one and an error names its line and
// key:
//
//   [intra]                 # between two hosts of one site: each host's link
//   alpha = 5e-5            # seconds of start-up per message
//   bandwidth = "10gbit"    # what one host sends per second (topo::parse_rate's forms)
//   [inter]                 # between sites
//   alpha = 0.02
//   bandwidth = "1gbit"     # each site's uplink, shared by every flow that leaves the site
//   [[site]]
//   name = "eu"
//   hosts = 8
//   [[site]]
//   name = "us"
//   hosts = 8
//   bandwidth = "500mbit"   # optional: this site's uplink, instead of inter.bandwidth
//
// Ranks go to the sites in order (the first site's hosts are ranks 0 .. h_0 - 1), so the ring
// all-reduce, which runs in rank order, crosses each site boundary once.

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "topo/cost_model.h"

namespace gradmesh::app {

/// One site of a links file.
struct Site {
  std::string name;
  std::size_t hosts = 0;  ///< >= 1
  double uplink = 0;      ///< bytes/s all its hosts together send to other sites
};

/// What a links file says.
struct SiteLinks {
  std::vector<Site> sites;  ///< in rank order
  topo::LinkCost intra;     ///< alpha (s) and B (bytes/s) of a host's link inside its site
  double inter_alpha = 0;   ///< seconds of start-up per message between sites
  [[nodiscard]] std::size_t nodes() const noexcept;  ///< the sites' hosts, n
};

/// The n x n matrix of `links` (n = the sites' hosts): ranks site by site; a pair inside a site
/// has the intra alpha and B, a pair across sites the inter alpha and B = min(intra B, both
/// sites' uplinks) (one flow alone); LinkMatrix::site and site_uplink set; message_seconds
/// `message_seconds` for every node. Pure. Throws ContractError on no sites or a site of 0 hosts.
[[nodiscard]] topo::LinkMatrix site_link_matrix(const SiteLinks& links, double message_seconds);

/// Reads a links file (the format above). Throws ConfigError naming the file, the table, the key
/// and its line for a missing or bad value or an unknown key, for no [[site]] tables, or for two
/// sites of one name.
[[nodiscard]] SiteLinks read_links_file(const std::filesystem::path& path);

/// One line for people: "2 sites (eu 8 hosts, us 8 hosts): inside 10 Gbit/s, alpha 50 us;
/// between 1 Gbit/s uplinks, alpha 20 ms". Pure.
[[nodiscard]] std::string describe(const SiteLinks& links);

}  // namespace gradmesh::app
