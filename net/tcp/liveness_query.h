#pragma once
// Internal to the TCP transport: the indirect probe of one silent peer (lifecycle.cpp).

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gradmesh::net::tcp {

/// The state of this node's question about one peer that has sent nothing for net.peer_timeout
/// (docs/failures.md, "Silent peers"): it asks every other peer it hears (LivenessQuery) whether
/// they hear that one. A report that one heard it within the timeout vouches for it (its link to
/// this node is slow, not the peer failed) and closes the question; when every peer asked has
/// answered without hearing it, or failed (a failed peer answers nothing: it counts as one that
/// does not hear), the question is settled: the peer failed. Times in milliseconds of the loop's
/// clock. Loop thread only; plain state.
class LivenessQuery {
 public:
  /// What a report or a failure did to the question.
  enum class Answer {
    kIgnored,  ///< no question out, or `from` was not asked or has answered already
    kPending,  ///< counted; other answers are still due
    kVouched,  ///< `from` heard the peer within the timeout: closed, the peer vouched for
    kSettled,  ///< the last answer due, and none heard it: the peer failed
  };

  /// A question is out (asked and not yet vouched for, settled or closed).
  [[nodiscard]] bool open() const noexcept { return asked_at_ms_ != 0; }
  /// Asks the peers `asked` (per rank: true for those asked; at least one) at `now_ms`.
  void start(std::uint64_t now_ms, std::vector<bool> asked);
  /// Drops the question (the peer was heard again, or failed by this node's own count).
  void close() noexcept { asked_at_ms_ = 0; }
  /// Forgets the question and what was vouched (a new connection to the peer).
  void reset() noexcept;

  /// A report from `from` that it last heard the peer `silent_ms` ago, arriving at `now_ms`, the
  /// peer timeout being `timeout_ms`.
  [[nodiscard]] Answer report(std::size_t from, std::uint64_t silent_ms, std::uint64_t now_ms,
                              std::uint64_t timeout_ms);
  /// Peer `from` failed: an answer that does not hear, if it was asked.
  [[nodiscard]] Answer peer_failed(std::size_t from);

  /// Whether another peer ever vouched for this one (since the last reset()).
  [[nodiscard]] bool vouched() const noexcept { return vouched_at_ms_ != 0; }
  /// How long, at `now_ms`, since the last time another peer heard it: `now_ms` when never.
  [[nodiscard]] std::uint64_t silent_by_reports_ms(std::uint64_t now_ms) const noexcept {
    return now_ms - (vouched_at_ms_ < now_ms ? vouched_at_ms_ : now_ms);
  }

 private:
  Answer count(std::size_t from);

  std::uint64_t asked_at_ms_ = 0;    // when the question went out; 0: none out
  std::size_t due_ = 0;              // answers not yet in
  std::vector<bool> asked_;          // per rank: asked, not yet answered
  std::uint64_t vouched_at_ms_ = 0;  // the last time another peer reported hearing it
};

}  // namespace gradmesh::net::tcp
