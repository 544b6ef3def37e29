#pragma once
// The link probe's lane and message kinds (sync/probe/link_probe.h): the start-up measurement
// of alpha and B on every link, the exchange of what each node measured, and start-up barriers.
// A lane every job has, whatever its strategy (sync/registry.cpp kCommonLanes).

#include <cstdint>
#include <string_view>

namespace gradmesh::sync::probe {

/// node <-> node: pings, bulk transfers, profiles and barriers before training starts.
inline constexpr std::string_view kLane = "probe";

/// Message::kind values of the probe lane.
enum class Kind : std::uint16_t {
  kPing = 1,      ///< key = the sender's ping number, no payload: answer kPong at once
  kPong = 2,      ///< key = the ping number it answers, no payload
  kBulk = 3,      ///< key = bytes of the whole transfer, round = bulk round r (1 .. n - 1, the
                  ///< receiver is sender + r mod n), payload = up to 256 KiB of the transfer
  kBulkAck = 4,   ///< key = bytes received, round = r: the receiver has the whole transfer;
                  ///< payload = 24 bytes, three little-endian u64: nanoseconds from the arrival
                  ///< of the transfer's first message to its last (0 for a transfer of one
                  ///< message), then the time (ns, 0: none) and bytes of its steady part
                  ///< (link_probe_internal.h: the messages before a stall)
  kPhase = 5,     ///< key = phase number, no payload: the sender has finished its pings
  kProfile = 6,   ///< payload = the sender's NodeProfile (see link_probe.cpp for the layout)
  kBarrier = 7,   ///< key = barrier tag, no payload: the sender has reached barrier(tag)
  kBulkDone = 8,  ///< key = 0, round = r, no payload: the sender's transfers of round r are over
                  ///< (it sends them one after another, growing, until one lasts long enough)
};

}  // namespace gradmesh::sync::probe
