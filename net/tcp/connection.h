#pragma once
// One TCP connection to a peer on the loop thread: the frame reader (prefix -> header -> payload
// read in place) and the writer (scatter/gather slices of the frames of its WriteQueue).
//
// Internal to gradmesh::net (includes <uv.h>); only net/tcp/ and tests use it.

#include <uv.h>

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "net/frame.h"
#include "net/payload.h"
#include "net/tcp/auth.h"
#include "net/tcp/frame_cipher.h"
#include "net/tcp/write_queue.h"

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
  /// A sealed frame did not open (start_opening()): altered, forged, replayed, or not sealed at
  /// all. The stream cannot go on; `why` names the part (header or payload) and its size.
  virtual void on_unverified(Connection& connection, const std::string& why) noexcept = 0;
  /// The stream cannot go on: EOF, a read or write error, or a prefix that cannot be resynced.
  /// `why` says which; `status` is the libuv error (UV_EOF, ...) or 0 for a protocol fault.
  virtual void on_broken(Connection& connection, int status, const std::string& why) noexcept = 0;
  /// `bytes` of `frame` reached the socket; `frame_done` when they were its last.
  virtual void on_written(Connection& connection, const OutgoingFrame& frame, std::size_t bytes,
                          bool frame_done) noexcept = 0;
  /// A write completed without error and the connection is open: bytes_unwritten() dropped, the
  /// owner may issue more. Called last in the write callback (after on_written() and the frame's
  /// release), so the owner may write or close from it.
  virtual void on_writable(Connection& connection) noexcept = 0;
  /// Bytes read from the socket (before framing), for totals.
  virtual void on_bytes_read(Connection& connection, std::size_t bytes) noexcept = 0;

 protected:
  ~ConnectionListener() = default;
};

/// Limits the reader enforces.
struct ReadLimits {
  std::size_t max_frame_bytes = 1ull << 30;  ///< prefix + header + payload
  std::size_t data_lane_count = 0;           ///< Data frames need lane < this
  bool handshake =
      true;  ///< before the handshake: header <= max_handshake_header_bytes, no payload
  std::size_t max_handshake_header_bytes =
      4096;  ///< kMaxPreAuthHeaderBytes or kMaxHandshakeHeaderBytes
};

/// Largest header accepted from a peer that has not proved itself yet: a Challenge, a Proof or a
/// Refuse is tens to hundreds of bytes.
inline constexpr std::size_t kMaxPreAuthHeaderBytes = 4096;
/// Largest header accepted after the peer proved itself, before the handshake completes (a Hello
/// with a long peer list, a Refuse naming one).
inline constexpr std::size_t kMaxHandshakeHeaderBytes = 1u << 20;
/// The header buffer grows by at most this much ahead of the bytes that arrived (a prefix that
/// announces a large header reserves nothing until the bytes come).
inline constexpr std::size_t kHeaderGrowthBytes = 4096;

/// Data frames on a sealed connection go in fragments of at most this many payload bytes (the
/// writer seals a whole fragment before its first byte is written, into a buffer of its own).
inline constexpr std::size_t kMaxSealedFragmentBytes = 1u << 20;

/// A uv_tcp_t plus framing. Create with `new` (make()); it deletes itself in its close callback,
/// so after close() the pointer stays valid until the loop runs the close callbacks.
/// Thread safety: loop thread only.
class Connection final {
 public:
  enum class Role : std::uint8_t { kDialer, kAcceptor };

  /// A connection on `loop` whose uv_tcp_t is initialised (not yet connected or accepted).
  /// `peer_rank` is known for a dialer; an acceptor learns it from the Challenge (a claim until
  /// the Proof is checked).
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
  /// Stops reading (`paused`) or reads on where it stopped, mid-frame or not (a test hook's:
  /// TcpTransport::pause_reading_for_testing). Returns a libuv error or 0.
  int set_reading_paused(bool paused) noexcept;

  /// From now on every frame queued (but raw ones) goes sealed with `key` (net/tcp/frame_cipher.h):
  /// its prefix in clear, then its header encrypted and a tag, then, when it has any, its payload
  /// encrypted and a tag, each fragment on its own (data frames are cut at
  /// kMaxSealedFragmentBytes at most). The writer seals a fragment as it starts, in write order,
  /// into a buffer of this connection's (reused; the payload, shared with other peers, is never
  /// written), so the message counter follows the wire. Call once, between two enqueue()s.
  void start_sealing(const auth::CipherKey& key) noexcept { sealer_.emplace(key); }
  /// From the next frame read on, every frame must arrive sealed with `key` and is opened in place;
  /// one that does not verify reports on_unverified(). Call once, from on_frame() (a frame
  /// boundary: the reader never reads past the frame it delivers).
  void start_opening(const auth::CipherKey& key) noexcept { opener_.emplace(key); }

  /// Queues `frame` in the write queue (WriteQueue's order); nothing is written until
  /// write_some(). Out of memory (a lane growing) reports on_broken() and drops the frame.
  void enqueue(std::unique_ptr<OutgoingFrame> frame) noexcept;
  /// Whether bytes are waiting for write_some(): a partly issued frame or queued ones.
  [[nodiscard]] bool has_unissued() const noexcept {
    return current_ != nullptr || interrupted_ != nullptr || !queue_.empty();
  }
  /// Data frames with more payload bytes than `bytes` go out cut into fragments of that many
  /// (OutgoingFrame::fragment), and a control frame queued meanwhile goes between two of them;
  /// 0: never cut (the default). Applies to frames not yet started.
  void set_fragment_bytes(std::size_t bytes) noexcept { fragment_bytes_ = bytes; }
  [[nodiscard]] std::size_t fragment_bytes() const noexcept { return fragment_bytes_; }
  /// Bytes handed to uv_write that libuv has not yet written to the socket (its write queue; a
  /// write the socket took at once never counts). Bytes in the kernel's socket buffer do not
  /// count: nothing could overtake them anyway.
  [[nodiscard]] std::size_t bytes_unwritten() const noexcept {
    return uv_stream_get_write_queue_size(reinterpret_cast<const uv_stream_t*>(&tcp_));
  }

  /// Calls `visit(const WriteCandidate&)` for what write_some() may write next: the rest of the
  /// partly issued frame's fragment alone if there is one (a TCP stream finishes a frame before
  /// starting another) — unless it stands between two fragments and a control frame is queued,
  /// which then goes first; else the queue's candidates (WriteQueue::for_each_candidate(by_lane,
  /// ...)), only its control frames while a cut frame waits between fragments.
  template <class Visit>
  void for_each_candidate(bool by_lane, Visit&& visit) const {
    if (const OutgoingFrame* next = next_started(); next != nullptr) {
      visit(WriteCandidate{next->lane(), next->priority,
                           next->fragment_at(next->issued).wire_end() - next->issued,
                           next->role() != FrameRole::kData});
    } else {
      queue_.for_each_candidate(by_lane, visit);
    }
  }

  /// Calls `visit(std::size_t lane)` for the lane of every data frame waiting: the partly issued
  /// one and the queued ones (a lane may repeat). A lane queued behind the partly issued frame is
  /// still backlogged: it waits for its turn, as it would behind another connection.
  template <class Visit>
  void for_each_backlogged_lane(Visit&& visit) const {
    if (current_ != nullptr && current_->role() == FrameRole::kData) visit(current_->lane());
    if (interrupted_ != nullptr) visit(interrupted_->lane());
    queue_.for_each_lane(visit);
  }

  /// Issues one uv_write of up to `max_bytes` (> 0) bytes, never past the end of a fragment: of
  /// the frame for_each_candidate() offers (the partly issued one, else the one the queue pops
  /// for `lane`, cut into fragments first when it is data over fragment_bytes()), as up to two
  /// uv_buf_t over the frame's own head and payload memory (no copy). Returns the bytes issued
  /// (0 if nothing is queued or the connection is closing). A sealed frame's fragment is sealed
  /// into a buffer of the connection's when it starts and written from there, in one uv_buf_t.
  /// A failed uv_write closes the stream and reports on_broken().
  std::size_t write_some(std::size_t max_bytes, std::size_t lane) noexcept;

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
  /// The remote end's IP address alone ("127.0.0.1", "::1"), or "unknown".
  [[nodiscard]] std::string remote_ip_address() const;

  // ---- the owner's per-connection state (the transport's handshake and shutdown bookkeeping) ----
  std::size_t dial_address = 0;   ///< dialer: index of the address it connects to (Dialer's)
  std::uint64_t accepted_ms = 0;  ///< acceptor: uv_now() at the accept (net.handshake_timeout)
  std::string remote_ip;          ///< acceptor: the dialer's IP address (the per-address cap)
  bool established = false;       ///< handshake done, frames go to the owner
  bool goodbye_sent = false;      ///< our Goodbye's last byte was written
  bool goodbye_received = false;  ///< the peer's Goodbye arrived
  bool in_ready_list = false;     ///< queued in the SendScheduler's ready list
  // heartbeats (TransportOptions::peer_timeout_s): uv_now() of the last byte read / written
  std::uint64_t last_heard_ms = 0;
  std::uint64_t last_written_ms = 0;
  std::string refusal;  ///< set when we refused this peer; reported after the write
  // authentication (net/tcp/auth.h), before `established`
  enum class Step : std::uint8_t { kChallenge, kProof, kHello, kRefused };
  Step step = Step::kChallenge;  ///< the next handshake frame expected from the peer
  auth::Nonce our_nonce{};
  auth::Nonce their_nonce{};

 private:
  enum class ReadState : std::uint8_t { kPrefix, kHeader, kPayload, kTag, kDiscard };
  // One sealed fragment's wire bytes, written from here; busy while it is being issued or any
  // write of it is in flight, then reused for another.
  struct SealedChunk {
    std::unique_ptr<std::byte[]> data;
    std::size_t capacity = 0;
    std::size_t writes_in_flight = 0;
  };
  struct WriteRequest {
    uv_write_t request;
    Connection* connection;
    OutgoingFrame* frame;
    SealedChunk* chunk;  // null for a frame in clear
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
  /// After the header's bytes (and tag) arrived: opens it if sealed, verifies it, and sets where
  /// its payload goes. False when the stream cannot go on (reported).
  bool take_header() noexcept;
  /// After the payload's bytes (and tag) arrived: opens them if sealed and delivers the frame (or
  /// its cut message, once whole). False when the stream cannot go on (reported).
  bool take_payload() noexcept;
  /// Seals the fragment `piece` of `frame` into a free chunk, or reports on_broken() and returns
  /// null (out of memory, or the message counter spent).
  SealedChunk* seal_fragment(const OutgoingFrame& frame,
                             const OutgoingFrame::Fragment& piece) noexcept;
  /// After a verified header: where its payload lands (payload_, or the next bytes of the cut
  /// message being put together). False when the frame breaks the fragment order (reported).
  bool begin_payload(const schema::Header& header) noexcept;
  /// The started frame write_some() goes on with, or null when it takes the queue's next: a
  /// cut frame between fragments yields to a queued control frame.
  [[nodiscard]] const OutgoingFrame* next_started() const noexcept;
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
  std::size_t header_target_ = 0;   // header bytes to read: the prefix's, plus a tag when sealed
  std::size_t discard_target_ = 0;  // payload bytes to skip (plus its tag when sealed)
  std::size_t frame_wire_ = 0;      // the current frame's wire bytes (tags included)
  std::vector<std::byte> header_;   // reused; grows to the largest header seen
  std::array<std::byte, auth::kTagBytes> payload_tag_{};
  Payload payload_;              // the frame's payload, read in place
  std::span<std::byte> region_;  // where the current frame's payload lands
  // A cut message being put together (Data.message_bytes > its first frame's payload): the whole
  // payload, read in place fragment by fragment; the first fragment's header (delivered with it);
  // payload and wire bytes so far. None while assembly_header_ is empty.
  Payload assembly_;
  std::vector<std::byte> assembly_header_;
  std::size_t assembled_ = 0;
  std::size_t assembly_wire_ = 0;
  bool fragment_ = false;           // the current frame's payload goes into assembly_
  std::string malformed_why_;       // set while discarding a malformed frame's payload
  std::vector<std::byte> discard_;  // scratch for skipped payloads, allocated on first use

  // writer: the partly issued frame, the frames not yet started, a pool of reusable write requests
  std::unique_ptr<OutgoingFrame> current_;
  std::unique_ptr<OutgoingFrame> interrupted_;  // a cut frame set aside between two fragments
  std::size_t fragment_bytes_ = 0;
  WriteQueue queue_;
  std::vector<std::unique_ptr<WriteRequest>> free_requests_;
  std::size_t requests_in_flight_ = 0;

  // the frame cipher (start_sealing / start_opening); chunks live as long as the connection
  std::optional<auth::Sealer> sealer_;
  std::optional<auth::Opener> opener_;
  std::vector<std::unique_ptr<SealedChunk>> chunks_;
  SealedChunk* sealing_ = nullptr;  // the chunk of the fragment being issued
};

}  // namespace gradmesh::net::detail
