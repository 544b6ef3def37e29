#pragma once
// One TCP connection to a peer on the loop thread: the frame reader (prefix -> header -> payload
// read in place) and the write queue (scatter/gather slices of queued frames).
//
// Internal to gradmesh::net (includes <uv.h>); only tcp_transport.cpp and tests use it.

#include <uv.h>

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "net/frame.h"
#include "net/payload.h"

namespace gradmesh::net::detail {

class Connection;

/// What a Connection reports to its owner. Every call is on the loop thread, from inside a libuv
/// callback; the owner may call Connection::close() from any of them. Must not throw.
class ConnectionListener {
 public:
  /// A dial finished: `status` 0 or a libuv error (e.g. UV_ECONNREFUSED).
  virtual void on_connected(Connection& connection, int status) noexcept = 0;
  /// A verified frame was read completely. `header` is valid during the call only; `wire_bytes`
  /// is prefix + header + payload.
  virtual void on_frame(Connection& connection, const schema::Header& header, Payload&& payload,
                        std::size_t wire_bytes) noexcept = 0;
  /// A frame whose header failed verification was read and skipped (the stream stays in sync).
  virtual void on_malformed(Connection& connection, const std::string& why,
                            std::size_t wire_bytes) noexcept = 0;
  /// The stream cannot go on: EOF, a read or write error, or a prefix that cannot be resynced.
  /// `why` says which; `status` is the libuv error (UV_EOF, ...) or 0 for a protocol fault.
  virtual void on_broken(Connection& connection, int status, const std::string& why) noexcept = 0;
  /// `bytes` of `frame` reached the socket; `frame_done` when they were its last.
  virtual void on_written(Connection& connection, const OutgoingFrame& frame, std::size_t bytes,
                          bool frame_done) noexcept = 0;
  /// Bytes read from the socket (before framing), for totals.
  virtual void on_bytes_read(Connection& connection, std::size_t bytes) noexcept = 0;

 protected:
  ~ConnectionListener() = default;
};

/// Limits the reader enforces.
struct ReadLimits {
  std::size_t max_frame_bytes = 1ull << 30;  ///< prefix + header + payload
  std::size_t data_stage_count = 0;          ///< Data frames need stage < this
  bool handshake = true;  ///< before the handshake: header <= kMaxHandshakeHeaderBytes, no payload
};

/// Largest header accepted before the handshake completes (a Hello with a long peer list).
inline constexpr std::size_t kMaxHandshakeHeaderBytes = 1u << 20;

/// A uv_tcp_t plus framing. Create with `new` (make()); it deletes itself in its close callback,
/// so after close() the pointer stays valid until the loop runs the close callbacks.
/// Thread safety: loop thread only.
class Connection final {
 public:
  enum class Role : std::uint8_t { kDialer, kAcceptor };

  /// A connection on `loop` whose uv_tcp_t is initialised (not yet connected or accepted).
  /// `peer_rank` is known for a dialer; an acceptor learns it from the Hello.
  [[nodiscard]] static Connection* make(uv_loop_t* loop, ConnectionListener& listener, Role role,
                                        std::size_t peer_rank, ReadLimits limits);

  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// The stream to hand to uv_accept().
  [[nodiscard]] uv_stream_t* stream() noexcept { return reinterpret_cast<uv_stream_t*>(&tcp_); }

  /// Dials `address`; the listener's on_connected() follows. Returns a libuv error if the dial
  /// could not even start.
  [[nodiscard]] int connect(const sockaddr* address) noexcept;

  /// Sets TCP_NODELAY and starts reading frames. Returns a libuv error or 0.
  [[nodiscard]] int start_reading() noexcept;

  /// Appends `frame` to the write queue (FIFO); nothing is written until write_some().
  void enqueue(std::unique_ptr<OutgoingFrame> frame) noexcept;
  /// Whether queued bytes are waiting for write_some().
  [[nodiscard]] bool has_unissued() const noexcept { return queue_head_ != nullptr; }
  /// Bytes the queue's first frame still has to issue.
  [[nodiscard]] std::size_t front_remaining() const noexcept;
  /// Issues one uv_write of up to `max_bytes` (> 0) of the first queued frame, as up to two
  /// uv_buf_t over the frame's own head and payload memory (no copy). Returns the bytes issued
  /// (0 if the queue is empty or the connection is closing). A failed uv_write closes the stream
  /// and reports on_broken().
  std::size_t write_some(std::size_t max_bytes) noexcept;

  /// Closes the socket (idempotent): queued frames are dropped, in-flight writes are cancelled,
  /// nothing more is reported to the listener after the close callbacks. Deletes itself later.
  void close() noexcept;
  [[nodiscard]] bool closing() const noexcept { return closing_; }

  [[nodiscard]] Role role() const noexcept { return role_; }
  [[nodiscard]] std::size_t peer_rank() const noexcept { return peer_rank_; }
  void set_peer_rank(std::size_t rank) noexcept { peer_rank_ = rank; }
  void set_limits(const ReadLimits& limits) noexcept { limits_ = limits; }

  /// "ip:port" of the remote end, or "unknown".
  [[nodiscard]] std::string remote_address() const;

  // ---- the owner's per-connection state (the transport's handshake and shutdown bookkeeping) ----
  bool established = false;       ///< handshake done, frames go to the owner
  bool goodbye_sent = false;       ///< our Goodbye's last byte was written
  bool goodbye_received = false;   ///< the peer's Goodbye arrived
  bool in_ready_list = false;      ///< queued in the owner's write round-robin
  std::string refusal;             ///< set when we refused this peer; reported after the write

 private:
  enum class ReadState : std::uint8_t { kPrefix, kHeader, kPayload, kDiscard };
  struct WriteRequest {
    uv_write_t request;
    Connection* connection;
    OutgoingFrame* frame;
    std::size_t bytes;
    bool frame_done;
  };

  Connection(uv_loop_t* loop, ConnectionListener& listener, Role role, std::size_t peer_rank,
             ReadLimits limits);
  ~Connection();

  static void on_alloc(uv_handle_t* handle, std::size_t suggested, uv_buf_t* buffer) noexcept;
  static void on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buffer) noexcept;
  static void on_write(uv_write_t* request, int status) noexcept;
  static void on_connect(uv_connect_t* request, int status) noexcept;
  static void on_close(uv_handle_t* handle) noexcept;

  /// Moves the reader forward after `filled_` grew; handles zero-length regions.
  void advance() noexcept;
  void begin_prefix() noexcept;
  void broken(int status, const std::string& why) noexcept;

  uv_tcp_t tcp_{};
  uv_connect_t connect_request_{};
  ConnectionListener& listener_;
  Role role_;
  std::size_t peer_rank_;
  ReadLimits limits_;
  bool closing_ = false;

  // reader
  ReadState read_state_ = ReadState::kPrefix;
  std::size_t filled_ = 0;  // bytes of the current region read so far
  std::array<std::byte, kPrefixBytes> prefix_bytes_{};
  FramePrefix prefix_;
  std::vector<std::byte> header_;  // reused; grows to the largest header seen
  Payload payload_;                // the frame's payload, read in place
  std::string malformed_why_;      // set while discarding a malformed frame's payload
  std::vector<std::byte> discard_; // scratch for skipped payloads, allocated on first use

  // writer: FIFO of frames not fully issued; a pool of reusable write requests
  std::unique_ptr<OutgoingFrame> queue_head_;
  OutgoingFrame* queue_tail_ = nullptr;
  std::vector<std::unique_ptr<WriteRequest>> free_requests_;
  std::size_t requests_in_flight_ = 0;
};

}  // namespace gradmesh::net::detail
