#include "net/tcp/handshake.h"

#include <cstdio>

namespace gradmesh::net {

namespace {

std::string hex(std::uint64_t value) {
  char text[19];
  std::snprintf(text, sizeof(text), "0x%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

std::string check_hello(const HelloFields& ours, const HelloFields& theirs) {
  if (theirs.protocol_version != ours.protocol_version)
    return "protocol version differs: ours " + std::to_string(ours.protocol_version) +
           ", theirs " + std::to_string(theirs.protocol_version);
  if (theirs.job_name != ours.job_name)
    return "job name differs: ours \"" + ours.job_name + "\", theirs \"" + theirs.job_name + "\"";
  if (theirs.config_hash != ours.config_hash)
    return "config hash differs: ours " + hex(ours.config_hash) + ", theirs " +
           hex(theirs.config_hash);
  if (theirs.peers.size() != ours.peers.size())
    return "peer list differs: ours has " + std::to_string(ours.peers.size()) +
           " peers, theirs " + std::to_string(theirs.peers.size());
  for (std::size_t r = 0; r < ours.peers.size(); ++r)
    if (theirs.peers[r] != ours.peers[r])
      return "peer list differs at rank " + std::to_string(r) + ": ours " + ours.peers[r] +
             ", theirs " + theirs.peers[r];
  if (theirs.rank >= ours.peers.size())
    return "rank " + std::to_string(theirs.rank) + " out of range: " +
           std::to_string(ours.peers.size()) + " peers";
  if (theirs.rank <= ours.rank)
    return "rank " + std::to_string(theirs.rank) + " must not dial rank " +
           std::to_string(ours.rank) + " (only higher ranks dial lower ones)";
  return {};
}

}  // namespace gradmesh::net
