#include "net/tcp/handshake.h"

#include <cstdio>

#include "engine/key_value_text.h"

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

/// The refusal of a Hello whose config hash differs: the keys that differ with both values, each
/// side named by its rank (the text reads the same at both ends), at most kMaxConfigErrorChars
/// of them; the two hashes when a side sent no config text or the texts agree.
std::string config_error(const HelloFields& ours, const HelloFields& theirs) {
  constexpr std::size_t kMaxConfigErrorChars = 1500;
  std::string keys;
  if (!ours.config_text.empty() && !theirs.config_text.empty())
    keys = key_value_difference(theirs.config_text, ours.config_text,
                                "on rank " + std::to_string(theirs.rank),
                                "on rank " + std::to_string(ours.rank));
  if (keys.empty())
    return "config hash differs: rank " + std::to_string(ours.rank) + " has " +
           hex(ours.config_hash) + ", rank " + std::to_string(theirs.rank) + " has " +
           hex(theirs.config_hash);
  if (keys.size() > kMaxConfigErrorChars)
    keys = keys.substr(0, kMaxConfigErrorChars) + "... (more keys differ)";
  return "config differs: " + keys +
         " (every node must run the same config; compare them with "
         "gradmesh-node --verbose, which prints it)";
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
  if (theirs.config_hash != ours.config_hash) return config_error(ours, theirs);
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
