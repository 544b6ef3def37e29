#include "net/tcp/resolve.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include "engine/error.h"

namespace gradmesh::net::tcp {

std::string ip_text(const sockaddr_storage& storage) {
  char ip[INET6_ADDRSTRLEN] = {};
  if (storage.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, ip,
              sizeof(ip));
  else
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, ip, sizeof(ip));
  return ip;
}

std::string address_text(const sockaddr_storage& storage) {
  if (storage.ss_family == AF_INET6) {
    std::string text(1, '[');  // appends, not "[" + std::string: GCC 12 -Wrestrict false positive
    text.append(ip_text(storage))
        .append("]:")
        .append(std::to_string(ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port)));
    return text;
  }
  return ip_text(storage) + ":" +
         std::to_string(ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port));
}

namespace {

// getaddrinfo for `host` (numeric only when `numeric`): every stream address, in its order.
// Returns the error text instead when there is none.
std::string lookup(const std::string& host, std::uint16_t port, bool numeric,
                   std::vector<ResolvedAddress>& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = numeric ? AI_NUMERICHOST : 0;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0 || result == nullptr) return gai_strerror(rc);
  for (const addrinfo* entry = result; entry != nullptr; entry = entry->ai_next) {
    if (entry->ai_family != AF_INET && entry->ai_family != AF_INET6) continue;
    ResolvedAddress address;
    std::memcpy(&address.socket_address, entry->ai_addr,
                std::min<std::size_t>(entry->ai_addrlen, sizeof(address.socket_address)));
    address.text = address_text(address.socket_address);
    const bool seen = std::any_of(out.begin(), out.end(),
                                  [&](const ResolvedAddress& a) { return a.text == address.text; });
    if (!seen) out.push_back(std::move(address));
  }
  freeaddrinfo(result);
  return out.empty() ? std::string("no IPv4 or IPv6 address") : std::string();
}

}  // namespace

std::vector<ResolvedAddress> resolve_all(std::size_t rank, const Endpoint& endpoint,
                                         const Resolver& resolver) {
  std::vector<ResolvedAddress> addresses;
  std::string why;
  if (!resolver) {
    why = lookup(endpoint.host, endpoint.port, false, addresses);
  } else {
    std::vector<std::string> literals;
    try {
      literals = resolver(endpoint.host);
    } catch (const std::exception& e) {
      why = std::string("the resolver threw: ") + e.what();
    }
    for (const auto& literal : literals) {
      const std::string bad = lookup(literal, endpoint.port, true, addresses);
      if (!bad.empty() && why.empty()) why = "the resolver gave '" + literal + "': " + bad;
    }
    if (why.empty() && addresses.empty()) why = "the resolver gave no address";
    if (!addresses.empty() && why.rfind("the resolver gave '", 0) == 0) addresses.clear();
  }
  if (addresses.empty())
    throw PeerError(rank, endpoint.to_string(),
                    "cannot resolve host '" + endpoint.host + "': " + why);
  return addresses;
}

}  // namespace gradmesh::net::tcp
