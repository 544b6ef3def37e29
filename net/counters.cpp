#include "net/counters.h"

#include <utility>

namespace gradmesh::net {

CounterBook::CounterBook(std::size_t peers, std::vector<std::string> lane_names)
    : lane_names_(std::move(lane_names)),
      sent_by_lane_(lane_names_.size()),
      received_by_lane_(lane_names_.size()) {
  totals_.bytes_sent_by_peer.assign(peers, 0);
  totals_.bytes_received_by_peer.assign(peers, 0);
  totals_.longest_silence_by_peer.assign(peers, 0.0);
}

void CounterBook::add_sent(std::size_t peer, std::size_t lane, std::uint64_t bytes,
                           std::uint64_t frames) {
  const std::lock_guard lock(mutex_);
  totals_.bytes_sent += bytes;
  totals_.frames_sent += frames;
  if (peer < totals_.bytes_sent_by_peer.size()) totals_.bytes_sent_by_peer[peer] += bytes;
  if (lane < sent_by_lane_.size()) sent_by_lane_[lane] += bytes;
}

void CounterBook::add_received(std::size_t peer, std::size_t lane, std::uint64_t bytes,
                               std::uint64_t frames) {
  const std::lock_guard lock(mutex_);
  totals_.frames_received += frames;
  if (peer < totals_.bytes_received_by_peer.size()) totals_.bytes_received_by_peer[peer] += bytes;
  if (lane < received_by_lane_.size()) received_by_lane_[lane] += bytes;
}

void CounterBook::add_read_bytes(std::uint64_t bytes, std::size_t peer, double silence_s) {
  const std::lock_guard lock(mutex_);
  totals_.bytes_received += bytes;
  if (peer < totals_.longest_silence_by_peer.size()) {
    double& longest = totals_.longest_silence_by_peer[peer];
    if (silence_s > longest) longest = silence_s;
  }
}

void CounterBook::add_malformed_frame() {
  const std::lock_guard lock(mutex_);
  ++totals_.malformed_frames;
}

void CounterBook::add_rejected_connection() {
  const std::lock_guard lock(mutex_);
  ++totals_.rejected_connections;
}

void CounterBook::add_unverified_frame() {
  const std::lock_guard lock(mutex_);
  ++totals_.unverified_frames;
}

Counters CounterBook::snapshot() const {
  const std::lock_guard lock(mutex_);
  Counters result = totals_;
  for (std::size_t s = 0; s < lane_names_.size(); ++s) {
    result.bytes_sent_by_lane[lane_names_[s]] += sent_by_lane_[s];
    result.bytes_received_by_lane[lane_names_[s]] += received_by_lane_[s];
  }
  return result;
}

}  // namespace gradmesh::net
