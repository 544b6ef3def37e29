#include "net/tcp/handshake.h"

#include <cstdio>

namespace gradmesh::net {

namespace {

std::string hex(std::uint64_t value) {
  char text[19];
  std::snprintf(text, sizeof(text), "0x%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::string version_error(std::uint32_t theirs) {
  if (theirs == kProtocolVersion) return {};
  return "protocol version differs: ours " + std::to_string(kProtocolVersion) + ", theirs " +
         std::to_string(theirs);
}

std::string rank_error(std::size_t theirs, std::size_t ours, std::size_t peers, bool rejoin) {
  if (theirs >= peers)
    return "rank " + std::to_string(theirs) + " out of range: " + std::to_string(peers) + " peers";
  if (theirs == ours && rejoin)
    return "rank " + std::to_string(theirs) + " is this node's own rank";
  if (theirs <= ours && !rejoin)
    return "rank " + std::to_string(theirs) + " must not dial rank " + std::to_string(ours) +
           " (only higher ranks dial lower ones)";
  return {};
}

}  // namespace

std::string check_hello(const HelloFields& ours, const HelloFields& theirs) {
  if (theirs.protocol_version != ours.protocol_version)
    return "protocol version differs: ours " + std::to_string(ours.protocol_version) + ", theirs " +
           std::to_string(theirs.protocol_version);
  if (theirs.job_name != ours.job_name)
    return "job name differs: ours \"" + ours.job_name + "\", theirs \"" + theirs.job_name + "\"";
  if (theirs.view != ours.view)  // (a newer view is told to retry before this check)
    return "view differs: ours " + std::to_string(ours.view) + ", theirs " +
           std::to_string(theirs.view) + " (a node left behind by a rollback)";
  if (theirs.config_hash != ours.config_hash)
    return "config hash differs: ours " + hex(ours.config_hash) + ", theirs " +
           hex(theirs.config_hash);
  if (theirs.peers.size() != ours.peers.size())
    return "peer list differs: ours has " + std::to_string(ours.peers.size()) + " peers, theirs " +
           std::to_string(theirs.peers.size());
  for (std::size_t r = 0; r < ours.peers.size(); ++r)
    if (theirs.peers[r] != ours.peers[r])
      return "peer list differs at rank " + std::to_string(r) + ": ours " + ours.peers[r] +
             ", theirs " + theirs.peers[r];
  return rank_error(theirs.rank, ours.rank, ours.peers.size(), theirs.rejoin);
}

std::string check_challenge(const auth::ChallengeFields& theirs, std::size_t own_rank,
                            std::size_t peers, bool own_secret, bool own_encrypt) {
  std::string reason = version_error(theirs.protocol_version);
  if (reason.empty()) reason = rank_error(theirs.rank, own_rank, peers, theirs.rejoin);
  if (reason.empty())
    reason = auth::secret_mismatch(own_rank, own_secret, theirs.rank, theirs.secret);
  if (reason.empty())
    reason = auth::encrypt_mismatch(own_rank, own_encrypt, theirs.rank, theirs.encrypt);
  return reason;
}

std::string check_acceptor_challenge(const auth::ChallengeFields& theirs, std::size_t own_rank,
                                     std::size_t expected_rank, bool own_secret, bool own_encrypt) {
  std::string reason = version_error(theirs.protocol_version);
  if (reason.empty() && theirs.rank != expected_rank)
    reason = "answered as rank " + std::to_string(theirs.rank) + ", expected rank " +
             std::to_string(expected_rank);
  if (reason.empty())
    reason = auth::secret_mismatch(own_rank, own_secret, theirs.rank, theirs.secret);
  if (reason.empty())
    reason = auth::encrypt_mismatch(own_rank, own_encrypt, theirs.rank, theirs.encrypt);
  return reason;
}

}  // namespace gradmesh::net
