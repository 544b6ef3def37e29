#include "apps/node/links_file.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include <toml++/toml.h>

#include "apps/node/toml_table.h"
#include "engine/error.h"
#include "topo/rate.h"

namespace gradmesh::app {

namespace {

using detail::TableReader;

/// Refuses a key of `table` that is not one of `known`, naming it and its line.
void check_keys(const std::filesystem::path& path, const toml::table& table,
                const std::string& where, std::initializer_list<std::string_view> known) {
  for (const auto& [key, node] : table) {
    if (std::find(known.begin(), known.end(), key.str()) != known.end()) continue;
    std::string expected;
    for (const std::string_view k : known)
      expected += (expected.empty() ? "" : ", ") + std::string(k);
    throw ConfigError(path.string() + ": " + where + " has an unknown key " +
                      std::string(key.str()) + " (line " +
                      std::to_string(node.source().begin.line) + "; known: " + expected + ")");
  }
}

const toml::table& table_at(const std::filesystem::path& path, const toml::table& root,
                            const std::string& name) {
  const toml::table* table = root[name].as_table();
  if (table == nullptr) {
    throw ConfigError(path.string() + ": no [" + name + "] table (alpha in seconds, bandwidth " +
                      "as a rate such as \"1gbit\"; see gradmesh-node simulate --help)");
  }
  return *table;
}

std::string seconds_text(double s) {
  char text[32];
  if (s >= 1e-3) {
    std::snprintf(text, sizeof text, "%.3g ms", s * 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.3g us", s * 1e6);
  }
  return text;
}

}  // namespace

std::size_t SiteLinks::nodes() const noexcept {
  std::size_t n = 0;
  for (const Site& s : sites) n += s.hosts;
  return n;
}

topo::LinkMatrix site_link_matrix(const SiteLinks& links, double message_seconds) {
  GRADMESH_CHECK(!links.sites.empty(), "site_link_matrix: at least one site");
  topo::LinkMatrix m;
  for (std::size_t s = 0; s < links.sites.size(); ++s) {
    GRADMESH_CHECK(links.sites[s].hosts >= 1, "site_link_matrix: every site has a host");
    m.site.insert(m.site.end(), links.sites[s].hosts, s);
    m.site_uplink.push_back(links.sites[s].uplink);
  }
  const std::size_t n = m.site.size();
  m.nodes = n;
  m.alpha.assign(n * n, 0.0);
  m.bandwidth.assign(n * n, links.intra.bandwidth);
  m.message_seconds.assign(n, message_seconds);
  for (std::size_t from = 0; from < n; ++from) {
    for (std::size_t to = 0; to < n; ++to) {
      if (from == to) continue;
      const std::size_t a = m.site[from], b = m.site[to];
      if (a == b) {
        m.alpha[from * n + to] = links.intra.alpha;
      } else {
        m.alpha[from * n + to] = links.inter_alpha;
        m.bandwidth[from * n + to] =
            std::min({links.intra.bandwidth, links.sites[a].uplink, links.sites[b].uplink});
      }
    }
  }
  return m;
}

SiteLinks read_links_file(const std::filesystem::path& path) {
  const toml::table root = detail::parse_toml_file(path, "a links file");
  check_keys(path, root, "the file", {"intra", "inter", "site"});
  SiteLinks links;
  const toml::table& intra = table_at(path, root, "intra");
  check_keys(path, intra, "[intra]", {"alpha", "bandwidth"});
  const TableReader in(path, intra, "[intra]");
  links.intra.alpha = in.number("alpha");
  links.intra.bandwidth = in.rate("bandwidth");
  const toml::table& inter = table_at(path, root, "inter");
  check_keys(path, inter, "[inter]", {"alpha", "bandwidth"});
  const TableReader out(path, inter, "[inter]");
  links.inter_alpha = out.number("alpha");
  const double uplink = out.rate("bandwidth");
  const toml::array* sites = root["site"].as_array();
  if (sites == nullptr || sites->empty()) {
    throw ConfigError(path.string() + ": no [[site]] tables (one a site: name, hosts, and " +
                      "optionally bandwidth, its uplink)");
  }
  std::set<std::string> names;
  for (std::size_t s = 0; s < sites->size(); ++s) {
    const std::string where = "[[site]] " + std::to_string(s);
    const toml::table& table = detail::table_entry(path, *sites->get(s), where);
    check_keys(path, table, where, {"name", "hosts", "bandwidth"});
    const TableReader t(path, table, where);
    Site site;
    site.name = t.text("name");
    site.hosts = static_cast<std::size_t>(t.integer("hosts", 1));
    site.uplink = t.has("bandwidth") ? t.rate("bandwidth") : uplink;
    if (!names.insert(site.name).second) {
      throw ConfigError(path.string() + ": " + where + " name = \"" + site.name +
                        "\": another site has that name (line " +
                        std::to_string(table.source().begin.line) + ")");
    }
    links.sites.push_back(std::move(site));
  }
  return links;
}

std::string describe(const SiteLinks& links) {
  std::string sites;
  for (const Site& s : links.sites) {
    sites += (sites.empty() ? "" : ", ") + s.name + " " + std::to_string(s.hosts) +
             (s.hosts == 1 ? " host" : " hosts");
    if (s.uplink != links.sites.front().uplink)
      sites += " (uplink " + topo::format_rate(s.uplink) + ")";
  }
  return std::to_string(links.sites.size()) + (links.sites.size() == 1 ? " site (" : " sites (") +
         sites + "): inside " + topo::format_rate(links.intra.bandwidth) + ", alpha " +
         seconds_text(links.intra.alpha) + "; between, uplinks of " +
         topo::format_rate(links.sites.front().uplink) + ", alpha " +
         seconds_text(links.inter_alpha);
}

}  // namespace gradmesh::app
