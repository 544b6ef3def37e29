#pragma once
// A restarted node rejoining a BSP job at the next checkpoint boundary (issue 13, "a restarted
// node can rejoin at the next checkpoint boundary"; README "When a peer fails"). Internal to
// apps/pipeline. The files live in the job's checkpoint.dir (view 0's), which a BSP job that rolls
// back already shares among its nodes (each node reads every node-<rank> folder to re-split):
//
//   <checkpoint.dir>/join-requests/<host>_<port>.json          the joiner's request (nonce,
//   address) <checkpoint.dir>/join-requests/<host>_<port>.refused.json  a refusal (nonce, reason)
//   <checkpoint.dir>/view-<k>/view.json                        view k's members, who was admitted
//
// The survivors exchange the requests each has seen at every checkpoint boundary (a round of
// sync::ResumeAgreement); on any, they finish the checkpoint, close the view cleanly and start
// view k + 1 with the joiners appended to the peer list, resuming from that checkpoint re-split
// over the larger node count; the joiner reads view.json and starts with them. The node that
// writes view.json takes the admitted requests down, so a joiner that dies before it connects is
// admitted once, not at every boundary.
//
// Thread safety: free functions, no shared state. Errors: CheckpointError naming the path for a
// file that cannot be written; a malformed file (not JSON, a name that is not its address, an
// address that is not one HOST:PORT) is skipped and logged, never fatal.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/error.h"

namespace gradmesh::app {

/// A join request: the restarted node's address (its entry in the job's peer list, "host:port")
/// and a random nonce that names this request (a node restarted twice files a new one).
struct JoinRequest {
  std::uint64_t nonce = 0;
  std::string address;
  friend bool operator==(const JoinRequest&, const JoinRequest&) = default;
};

/// Files a request for `address` under `root` (checkpoint.dir) with a fresh random nonce,
/// atomically (temporary file, fsync, rename), replacing an older request of that address.
[[nodiscard]] JoinRequest file_join_request(const std::filesystem::path& root,
                                            const std::string& address);
/// Every request under `root` that parses (any order); a malformed file is logged and skipped.
[[nodiscard]] std::vector<JoinRequest> read_join_requests(const std::filesystem::path& root);
/// Removes the request of `request.address` if it is still this one (not a newer request).
void withdraw_join_request(const std::filesystem::path& root, const JoinRequest& request);

/// Requests as a list of numbers for a sync::ResumeAgreement round: per request its nonce, the
/// address's length in bytes, then the address in 8-byte words.
[[nodiscard]] std::vector<std::uint64_t> encode_join_requests(
    std::span<const JoinRequest> requests);
/// The inverse of encode_join_requests. Throws ProtocolError for a list that is not one.
[[nodiscard]] std::vector<JoinRequest> decode_join_requests(std::span<const std::uint64_t> words);
/// The requests of every node's list (decoded), one per address: of two requests of one address
/// the larger nonce (the same choice on every node), sorted by address.
[[nodiscard]] std::vector<JoinRequest> merge_join_requests(
    const std::vector<std::vector<std::uint64_t>>& lists);

/// A view a BSP job grew into (view.json): its number, its peers in rank order (the old view's
/// in their order, the joiners after them), the folder and node count of the checkpoint every
/// node resumes from, its iteration there, and the nonces of the requests admitted.
struct ViewAdmission {
  std::uint64_t view = 0;
  std::vector<std::string> peers;
  std::filesystem::path resume;
  std::size_t resume_nodes = 0;
  std::uint64_t iteration = 0;
  std::vector<std::uint64_t> admitted;
};

/// A view's identity beside its number: 8 lower-case hex digits of a CRC-32 (zlib) of `peers`
/// ("host:port" in rank order) joined by commas. The same on every member; two views of
/// different members differ (but for a CRC collision, 1 in 2^32).
[[nodiscard]] std::string view_id(const std::vector<std::string>& peers);
/// `root`/view-<view>-<view_id(peers)>: the checkpoint folder of view `view` of members `peers`
/// (view 0's is `root` itself). The halves of a split, each in its own view `view`, get folders
/// of their own.
[[nodiscard]] std::filesystem::path view_dir(const std::filesystem::path& root, std::uint64_t view,
                                             const std::vector<std::string>& peers);
/// Writes view_dir(root, admission.view, admission.peers)/view.json atomically.
void write_view_admission(const std::filesystem::path& root, const ViewAdmission& admission);
/// The view.json under `root` that admits `nonce`, if one does (the newest view if several).
[[nodiscard]] std::optional<ViewAdmission> find_view_admission(const std::filesystem::path& root,
                                                               std::uint64_t nonce);

/// Refuses `request` with `reason` (the job has ended; its address is a live member's).
void write_join_refusal(const std::filesystem::path& root, const JoinRequest& request,
                        const std::string& reason);
/// The reason `request` was refused, if it was (a refusal of another nonce does not count).
[[nodiscard]] std::optional<std::string> find_join_refusal(const std::filesystem::path& root,
                                                           const JoinRequest& request);

/// Thrown out of Pipeline::run() at a checkpoint boundary where the nodes agreed to take
/// restarted nodes back (every node throws it at the same iteration, after its checkpoint is on
/// disk and its transport closed cleanly); run_with_recovery() starts the grown view.
class ViewGrowth : public Error {
 public:
  ViewGrowth(std::uint64_t iteration, std::vector<JoinRequest> joiners);
  [[nodiscard]] std::uint64_t iteration() const noexcept { return iteration_; }
  /// Sorted by address: their ranks in the grown view follow the old view's, in this order.
  [[nodiscard]] const std::vector<JoinRequest>& joiners() const noexcept { return joiners_; }

 private:
  std::uint64_t iteration_;
  std::vector<JoinRequest> joiners_;
};

}  // namespace gradmesh::app
