#pragma once
// Byte and frame counters of a Transport.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace gradmesh::net {

/// A snapshot of a Transport's counters (Transport::counters()). All byte counts are wire bytes
/// (8-byte prefix + FlatBuffers header + payload) actually written to / read from sockets.
/// Plain value type.
struct Counters {
  std::uint64_t bytes_sent = 0;       ///< bytes written to all sockets
  std::uint64_t bytes_received = 0;   ///< bytes read from all sockets, including rejected ones
  std::uint64_t frames_sent = 0;      ///< frames whose last byte was written
  std::uint64_t frames_received = 0;  ///< well-formed frames read completely
  std::uint64_t malformed_frames =
      0;  ///< frames rejected from handshaked peers, and handler exceptions
  std::uint64_t rejected_connections = 0;  ///< inbound connections closed during the handshake
  /// sealed frames that did not verify (net/tcp/frame_cipher.h): altered, forged or replayed on
  /// the way; each closed its connection
  std::uint64_t unverified_frames = 0;
  std::vector<std::uint64_t> bytes_sent_by_peer;      ///< index = rank; size = number of peers
  std::vector<std::uint64_t> bytes_received_by_peer;  ///< index = rank; bytes of identified peers
  std::map<std::string, std::uint64_t> bytes_sent_by_lane;  ///< every lane name, incl. "control"
  std::map<std::string, std::uint64_t> bytes_received_by_lane;  ///< well-formed frames only
  /// index = rank: the longest time, seconds, an established connection to that peer went without
  /// a byte read (ms resolution; the gap ends at the read that closes it, so a silence still
  /// running is not in it). Heartbeats keep an idle link's gaps near a quarter of
  /// TransportOptions::peer_timeout_s; a gap near the timeout is a peer about to be failed.
  std::vector<double> longest_silence_by_peer;
};

/// The live counters behind Counters (internal to the transport, public for tests).
/// Thread safety: every member may be called from any thread (one mutex).
class CounterBook final {
 public:
  /// Sentinel peer for bytes of a connection whose rank is not known (yet); counted in totals only.
  static constexpr std::size_t kUnknownPeer = static_cast<std::size_t>(-1);
  /// Sentinel lane for bytes that belong to no lane (malformed frames).
  static constexpr std::size_t kNoLane = static_cast<std::size_t>(-1);

  /// `peers` ranks, lane names indexed by lane id.
  CounterBook(std::size_t peers, std::vector<std::string> lane_names);

  /// `bytes` written to `peer` for `lane`; `frames` frames completed by this write.
  void add_sent(std::size_t peer, std::size_t lane, std::uint64_t bytes, std::uint64_t frames);
  /// `bytes` read from any socket (bytes_received; counted as they arrive, before framing); from
  /// `peer` (kUnknownPeer before the handshake) after `silence_s` seconds without a byte read from
  /// it (longest_silence_by_peer).
  void add_read_bytes(std::uint64_t bytes, std::size_t peer = kUnknownPeer, double silence_s = 0);
  /// A frame's `bytes` read from `peer` for `lane` (per-peer and per-lane counts; the total is
  /// add_read_bytes'); `frames` well-formed frames completed.
  void add_received(std::size_t peer, std::size_t lane, std::uint64_t bytes, std::uint64_t frames);
  void add_malformed_frame();
  void add_rejected_connection();
  void add_unverified_frame();

  [[nodiscard]] Counters snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lane_names_;
  Counters totals_;  // by_lane maps unused here: see the vectors below
  std::vector<std::uint64_t> sent_by_lane_;
  std::vector<std::uint64_t> received_by_lane_;
};

}  // namespace gradmesh::net
