#pragma once
// The gradmesh exception hierarchy and contract checks (STYLE.md practice 4).
//
// Every error says what was expected and what came. I/O threads never throw: a failure there is
// stored as a value (std::exception_ptr) and rethrown on the caller's thread.

#include <cstddef>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace gradmesh {

/// Base of every gradmesh error. Thread safety: immutable after construction.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A job config key has a bad value, an unknown name or is missing. The message names the key,
/// the value and what was expected.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A data file is missing, truncated or malformed. The message names the path.
class DataError : public Error {
 public:
  using Error::Error;
};

/// A checkpoint file or folder is missing, torn, corrupt, of another format version, or does not
/// fit this job (engine/checkpoint.h). The message names the path (and the section or key).
class CheckpointError : public Error {
 public:
  using Error::Error;
};

/// A peer is unreachable, refused us, misbehaved or disappeared. Carries its rank and address.
class PeerError : public Error {
 public:
  /// `failed_peer`: when the peer stopped because *another* rank failed (its Abort said which,
  /// net::Transport::abort_for), that rank.
  PeerError(std::size_t rank, std::string address, const std::string& what,
            std::optional<std::size_t> failed_peer = std::nullopt)
      : Error("peer rank " + std::to_string(rank) + " (" + address + "): " + what),
        rank_(rank),
        address_(std::move(address)),
        failed_peer_(failed_peer) {}
  /// Rank of the peer at fault, as in the peer list.
  [[nodiscard]] std::size_t rank() const noexcept { return rank_; }
  /// "host:port" of the peer at fault.
  [[nodiscard]] const std::string& address() const noexcept { return address_; }
  /// The rank whose failure made this peer stop, if it said so (else the peer itself failed).
  [[nodiscard]] std::optional<std::size_t> failed_peer() const noexcept { return failed_peer_; }
  /// The rank that is gone: failed_peer() if set, else rank().
  [[nodiscard]] std::size_t root_rank() const noexcept { return failed_peer_.value_or(rank_); }

 private:
  std::size_t rank_;
  std::string address_;
  std::optional<std::size_t> failed_peer_;
};

/// A message broke the wire protocol (bad framing, unverifiable header, wrong version).
class ProtocolError : public Error {
 public:
  using Error::Error;
};

/// A broken internal contract (a bug in gradmesh or in a user task): thrown by GRADMESH_CHECK*.
class ContractError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename A, typename B>
[[noreturn]] void check_failed(const char* expr_a, const char* op, const char* expr_b, const A& a,
                               const B& b, const char* file, int line, const std::string& what) {
  std::ostringstream out;
  out << file << ":" << line << ": check failed: " << expr_a << " " << op << " " << expr_b << " ("
      << a << " vs " << b << ")";
  if (!what.empty()) out << ": " << what;
  throw ContractError(out.str());
}
}  // namespace detail

}  // namespace gradmesh

/// Contract checks that print both operands, like gloo's ENFORCE_EQ. Throw gradmesh::ContractError.
#define GRADMESH_CHECK_OP(a, op, b, what)                                                         \
  do {                                                                                            \
    const auto& gm_check_a_ = (a);                                                                \
    const auto& gm_check_b_ = (b);                                                                \
    if (!(gm_check_a_ op gm_check_b_))                                                            \
      ::gradmesh::detail::check_failed(#a, #op, #b, gm_check_a_, gm_check_b_, __FILE__, __LINE__, \
                                       (what));                                                   \
  } while (false)
#define GRADMESH_CHECK_EQ(a, b, what) GRADMESH_CHECK_OP(a, ==, b, what)
#define GRADMESH_CHECK_LE(a, b, what) GRADMESH_CHECK_OP(a, <=, b, what)
#define GRADMESH_CHECK_LT(a, b, what) GRADMESH_CHECK_OP(a, <, b, what)
#define GRADMESH_CHECK_NE(a, b, what) GRADMESH_CHECK_OP(a, !=, b, what)
#define GRADMESH_CHECK_GT(a, b, what) GRADMESH_CHECK_OP(a, >, b, what)
#define GRADMESH_CHECK(cond, what)                                                             \
  do {                                                                                         \
    if (!(cond))                                                                               \
      throw ::gradmesh::ContractError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                      ": check failed: " #cond ": " + std::string(what));      \
  } while (false)
