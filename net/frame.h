#pragma once
// Framing: the 8-byte prefix, the FlatBuffers header (net/schema/message.fbs), and the outgoing
// frame object that carries both plus a shared payload to the socket.
//
// On the wire a frame is
//   u32 header_bytes | u32 payload_bytes   (little-endian, kPrefixBytes in all)
//   header_bytes of a verified schema::Header
//   payload_bytes of raw payload
// The payload is never copied into the FlatBuffers builder: the transport writes the prefix+header
// buffer and the payload as two uv_buf_t (scatter/gather).

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "net/message.h"
#include "net/payload.h"
#include "net/schema/message_generated.h"

namespace gradmesh::net {

/// Version of this wire protocol; a Hello with another version is refused.
inline constexpr std::uint32_t kProtocolVersion =
    11;  // 4: Challenge/Proof; 5: Heartbeat;
         // 6: rejoin; 7: LivenessQuery/Report;
         // 8: fragments (Data.message_bytes, DataMore);
         // 9: sealed frames (Challenge.encrypt);
         // 10: start-up collectives (round, key 0);
         // 11: ConnectionNotice
/// Bytes of the frame prefix (u32 header_bytes, u32 payload_bytes).
inline constexpr std::size_t kPrefixBytes = 8;

/// The decoded 8-byte frame prefix. Plain value type.
struct FramePrefix {
  std::uint32_t header_bytes = 0;
  std::uint32_t payload_bytes = 0;

  /// kPrefixBytes + header_bytes + payload_bytes, without overflow.
  [[nodiscard]] std::uint64_t frame_bytes() const noexcept {
    return kPrefixBytes + std::uint64_t{header_bytes} + payload_bytes;
  }
};

/// Whether a reader accepts a frame announced by `prefix`, before it allocates anything for it:
/// "" if so, else why not (naming the sizes). A frame is at most `max_frame_bytes` in all
/// (net.max_frame_bytes); before the handshake has completed (`handshake`), its header is at
/// most `max_handshake_header_bytes` and it has no payload. Pure; never throws except
/// std::bad_alloc.
[[nodiscard]] std::string check_prefix(const FramePrefix& prefix, std::uint64_t max_frame_bytes,
                                       bool handshake, std::size_t max_handshake_header_bytes);

/// Writes `prefix` as 8 little-endian bytes to `out`.
void encode_prefix(const FramePrefix& prefix, std::span<std::byte, kPrefixBytes> out) noexcept;
/// Reads 8 little-endian bytes.
[[nodiscard]] FramePrefix decode_prefix(std::span<const std::byte, kPrefixBytes> in) noexcept;

/// What the transport does once a frame's last byte was written.
enum class FrameRole : std::uint8_t {
  kData,     ///< a caller's message
  kControl,  ///< Hello, HelloAck, raw test bytes
  kGoodbye,  ///< the last frame of a clean shutdown
  kRefuse,   ///< handshake refusal: close the connection after it
  kAbort,    ///< this node stops on an error: the reason, sent before an abrupt close
};

/// One frame queued for a socket: prefix + header bytes (owned, usually inline) and the payload
/// (shared, not copied). Created on the sender's thread, then owned by the loop thread until its
/// last byte is written; one heap allocation a frame.
///
/// The write-progress fields are the loop thread's; nothing else touches them.
class OutgoingFrame final {
 public:
  /// Prefix + `header` (a finished FlatBuffers buffer) + `payload`, counted under `lane`.
  /// Throws gradmesh::ProtocolError when header or payload exceed 4 GiB - 1.
  OutgoingFrame(std::span<const std::uint8_t> header, Payload payload, std::size_t lane,
                FrameRole role);

  /// A frame of arbitrary `raw` bytes, written as is (tests inject malformed frames with it).
  [[nodiscard]] static std::unique_ptr<OutgoingFrame> raw(std::span<const std::byte> raw,
                                                          std::size_t lane);

  OutgoingFrame(const OutgoingFrame&) = delete;
  OutgoingFrame& operator=(const OutgoingFrame&) = delete;

  /// Prefix + header bytes.
  [[nodiscard]] std::span<const std::byte> head() const noexcept {
    return {large_head_ ? large_head_.get() : inline_head_.data(), head_size_};
  }
  [[nodiscard]] const Payload& payload() const noexcept { return payload_; }
  /// The bytes this frame puts on the socket: head().size() + payload().size(), plus a DataMore
  /// head per fragment after the first once fragment() cut it, plus its tags once add_tags().
  [[nodiscard]] std::size_t wire_bytes() const noexcept {
    return head_size_ + payload_.size() + (fragments_ - 1) * more_head_size_ +
           tag_bytes_ * (fragments_ + (payload_.empty() ? 0 : fragments_));
  }
  [[nodiscard]] std::size_t lane() const noexcept { return lane_; }
  [[nodiscard]] FrameRole role() const noexcept { return role_; }

  // ---- send order (net/tcp/write_queue.h) ----
  /// Message::priority of a data frame (lower is written first), set by encode_data() on the
  /// sender's thread; 0 for other frames. Not on the wire.
  std::uint32_t priority = 0;
  /// Queue order on its connection, set by the loop thread when the frame is queued.
  std::uint64_t sequence = 0;

  // ---- fragments (the loop thread's; net/schema/message.fbs, Data and DataMore) ----
  /// One fragment as it goes on the wire: its head (prefix + header), its range of the payload
  /// [payload_begin, payload_end), its first byte's offset among the frame's wire bytes, and the
  /// bytes of each tag that follows its header and its payload (0 when the frame has none).
  struct Fragment {
    std::span<const std::byte> head;
    std::size_t payload_begin = 0;
    std::size_t payload_end = 0;
    std::size_t wire_begin = 0;
    std::size_t tag_bytes = 0;
    /// Wire bytes of the fragment: head, tag, payload, and the payload's tag if it has bytes.
    [[nodiscard]] std::size_t wire_size() const noexcept {
      const std::size_t payload = payload_end - payload_begin;
      return head.size() + payload + tag_bytes * (payload > 0 ? 2 : 1);
    }
    [[nodiscard]] std::size_t wire_end() const noexcept { return wire_begin + wire_size(); }
  };
  /// Cuts a data frame into fragments of `fragment_bytes` payload bytes (the last one shorter), so
  /// that a control frame can go between them (a heartbeat, a liveness answer, an Abort need not
  /// wait for a whole multi-MB message on a slow link). The first fragment is this frame's head
  /// with its prefix announcing `fragment_bytes` (its Data header's message_bytes, set by
  /// encode_data(), still the whole payload); each further one is a DataMore frame; wire_bytes()
  /// grows by one DataMore head (kDataMoreHeadBytes) per further fragment. No-op when the payload
  /// fits in one fragment. No allocation. Throws gradmesh::ContractError for a frame that is not
  /// data, one with bytes already issued, or `fragment_bytes` == 0.
  void fragment(std::size_t fragment_bytes);
  /// Seals the frame on the wire (net/tcp/frame_cipher.h): each fragment's header goes encrypted
  /// and followed by a `tag_bytes` tag, and so does its payload when it has bytes; the prefix stays
  /// in clear (authenticated with the header). wire_bytes() and fragment_at() count the tags; the
  /// writer (net/tcp/connection.cpp) seals each fragment as it starts. Throws
  /// gradmesh::ContractError for a raw frame or one with bytes already issued.
  void add_tags(std::size_t tag_bytes);
  /// Bytes of each tag (0: the frame goes in clear).
  [[nodiscard]] std::size_t tag_bytes() const noexcept { return tag_bytes_; }
  /// Whether raw() made the frame (it goes on the wire as is, never sealed).
  [[nodiscard]] bool is_raw() const noexcept { return raw_; }
  /// How many fragments the frame goes in (1 unless fragment() cut it).
  [[nodiscard]] std::size_t fragments() const noexcept { return fragments_; }
  /// The fragment holding wire byte `offset` (< wire_bytes()).
  [[nodiscard]] Fragment fragment_at(std::size_t offset) const noexcept;

  // ---- loop-thread write progress ----
  std::size_t issued = 0;            ///< bytes handed to uv_write so far
  std::size_t writes_in_flight = 0;  ///< uv_write requests not yet completed
  bool detached = false;             ///< dropped by a closed connection while partly written

 private:
  static constexpr std::size_t kInlineHeadBytes = 160;
  static constexpr std::size_t kMoreHeadCapacity = 64;
  OutgoingFrame(std::size_t head_size, std::size_t lane, FrameRole role);
  std::byte* head_data() noexcept { return large_head_ ? large_head_.get() : inline_head_.data(); }

  std::size_t head_size_;
  std::size_t lane_;
  FrameRole role_;
  Payload payload_;
  std::unique_ptr<std::byte[]> large_head_;  // only when the head exceeds kInlineHeadBytes
  std::array<std::byte, kInlineHeadBytes> inline_head_;
  // fragment(): payload bytes per fragment (0: not cut), the count, and the DataMore heads of the
  // middle fragments and of the last (their prefixes differ in payload_bytes only). Each stays
  // valid while a write of it is in flight: the frame outlives its writes.
  std::size_t fragment_bytes_ = 0;
  std::size_t fragments_ = 1;
  std::size_t tag_bytes_ = 0;  // add_tags()
  bool raw_ = false;
  std::size_t more_head_size_ = 0;
  std::array<std::byte, kMoreHeadCapacity> more_head_{};
  std::array<std::byte, kMoreHeadCapacity> last_head_{};
};

/// Bytes of a DataMore frame's head (prefix + header): the wire cost of each fragment after a
/// cut message's first.
[[nodiscard]] std::size_t data_more_head_bytes() noexcept;

/// The fields of a Hello (see net/handshake.h for how they are checked). Plain value type.
struct HelloFields {
  std::uint32_t protocol_version = kProtocolVersion;
  std::size_t rank = 0;
  std::string job_name;
  std::uint64_t config_hash = 0;
  std::vector<std::string> peers;  ///< "host:port", index = rank
  std::uint32_t view = 0;          ///< TransportOptions::view
  bool rejoin = false;             ///< TransportOptions::rejoin
  std::string config_text;         ///< TransportOptions::config_text
};

/// Frame builders. `control_lane` is the counter lane id of "control". Thread safe (each thread
/// reuses its own FlatBuffers builder, so a data frame costs one allocation: the OutgoingFrame).
/// encode_data() copies Message::priority into OutgoingFrame::priority.
[[nodiscard]] std::unique_ptr<OutgoingFrame> encode_data(const Message& message);
[[nodiscard]] std::unique_ptr<OutgoingFrame> encode_hello(const HelloFields& hello,
                                                          std::size_t control_lane);
[[nodiscard]] std::unique_ptr<OutgoingFrame> encode_hello_ack(std::size_t rank,
                                                              std::size_t control_lane);
/// `retry`: the refused dialer should dial again (this node is still leaving an older view).
[[nodiscard]] std::unique_ptr<OutgoingFrame> encode_refuse(const std::string& reason,
                                                           std::size_t control_lane,
                                                           bool retry = false);
[[nodiscard]] std::unique_ptr<OutgoingFrame> encode_goodbye(std::size_t control_lane);
/// `failed_rank`: the rank whose failure made this node stop (the receivers' PeerError names it:
/// PeerError::failed_peer), or none for an error of its own.
[[nodiscard]] std::unique_ptr<OutgoingFrame> encode_abort(
    const std::string& reason, std::size_t control_lane,
    std::optional<std::size_t> failed_rank = std::nullopt);
[[nodiscard]] std::unique_ptr<OutgoingFrame> encode_heartbeat(std::size_t control_lane);
/// A ConnectionNotice (net/schema/message.fbs): this node closes its connection to `rank` because
/// of `reason` (a frame that did not verify).
[[nodiscard]] std::unique_ptr<OutgoingFrame> encode_connection_notice(std::size_t rank,
                                                                      const std::string& reason,
                                                                      std::size_t control_lane);
/// A LivenessQuery about `rank` (net/schema/message.fbs) and the answer to one: `silent_ms`, how
/// long since this node read a byte from `rank` (kNotHeardMs: no connection to it).
inline constexpr std::uint32_t kNotHeardMs = 0xFFFFFFFFu;
[[nodiscard]] std::unique_ptr<OutgoingFrame> encode_liveness_query(std::size_t rank,
                                                                   std::size_t control_lane);
[[nodiscard]] std::unique_ptr<OutgoingFrame> encode_liveness_report(std::size_t rank,
                                                                    std::uint32_t silent_ms,
                                                                    std::size_t control_lane);

/// The result of verify_header(): `header` on success, else `error` says what is wrong.
struct HeaderCheck {
  const schema::Header* header = nullptr;  ///< points into the verified bytes
  std::string error;
};

/// Verifies `bytes` as a schema::Header with flatbuffers::Verifier (file identifier "GMSH"),
/// requires a known body type with its body present (so body_as_X() of the verified type is not
/// null), and for Data a lane < `data_lane_count`. Never throws.
[[nodiscard]] HeaderCheck verify_header(std::span<const std::byte> bytes,
                                        std::size_t data_lane_count) noexcept;

/// HelloFields of a verified Hello.
[[nodiscard]] HelloFields decode_hello(const schema::Hello& hello);

}  // namespace gradmesh::net
