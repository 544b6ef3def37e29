#include "net/inproc/inproc_transport.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "net/frame.h"
#include "net/lane_scheduler.h"
#include "net/transport_options.h"

namespace gradmesh::net {

namespace detail {

/// What one rank receives: a message, or the news that a peer failed.
struct Envelope {
  std::size_t from = 0;
  Message message;
  std::optional<PeerError> failure;
  std::size_t wire = 0;  // bytes TCP would put on the socket for `message` (counted once, at send)
  std::chrono::steady_clock::time_point ready_at;  // delivered no sooner (set_link_rate())
};

/// One rank's state. Everything under InProcMesh::mutex.
struct Mailbox {
  enum class State { kIdle, kRunning, kLeaving, kGone };
  State state = State::kIdle;
  bool failed = false;  // closed or aborted (peers hold a PeerError for it)
  std::string failure_reason;
  std::deque<Envelope> queue;
  Transport::MessageHandler on_message;
  Transport::FailureHandler on_failure;
  std::thread thread;
  std::unique_ptr<CounterBook> counters;
  std::vector<double> lane_weights;  // stored, unused: no link to share
  // Simulated slow links from this rank, by receiver (InProcTransport::set_link_rate()): bytes/s
  // (0: instant) and when the link has delivered everything sent on it so far.
  std::vector<double> link_rate;
  std::vector<std::chrono::steady_clock::time_point> link_free_at;
  std::vector<double> link_latency;  // seconds, by receiver (set_link_latency()); 0: none
  std::vector<char> cut;             // by peer: the link is cut (cut_link()); reported once
};

struct InProcMesh {
  explicit InProcMesh(std::size_t ranks, std::vector<std::string> lane_names)
      : lanes(std::move(lane_names)), boxes(ranks) {
    std::vector<std::string> counted = lanes;
    counted.emplace_back(kControlLane);
    for (Mailbox& box : boxes) {
      box.counters = std::make_unique<CounterBook>(ranks, counted);
      box.link_rate.assign(ranks, 0.0);
      box.link_latency.assign(ranks, 0.0);
      box.cut.assign(ranks, 0);
      box.link_free_at.assign(ranks, std::chrono::steady_clock::time_point{});
    }
  }
  std::vector<std::string> lanes;
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Mailbox> boxes;

  static std::string address(std::size_t rank) { return "inproc:" + std::to_string(rank); }
  PeerError failure_of(std::size_t rank) const {
    return PeerError(rank, address(rank), boxes[rank].failure_reason);
  }
  static PeerError cut_of(std::size_t rank) {
    return PeerError(rank, address(rank), "link cut (a network partition)");
  }
};

}  // namespace detail

namespace {

using detail::Envelope;
using detail::InProcMesh;
using detail::Mailbox;

// The first envelope in `queue` that may be delivered now: the oldest of its sender (per-peer
// order) and past its ready_at. Otherwise queue.end(), with `next` the earliest ready_at among the
// senders' oldest envelopes (for the wait).
std::deque<Envelope>::iterator next_ready(std::deque<Envelope>& queue, std::size_t ranks,
                                          std::chrono::steady_clock::time_point now,
                                          std::chrono::steady_clock::time_point& next) {
  next = std::chrono::steady_clock::time_point::max();
  if (!queue.empty() && queue.front().ready_at <= now) return queue.begin();  // the common case
  std::vector<bool> seen(ranks, false);
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    if (seen[it->from]) continue;
    seen[it->from] = true;
    if (it->ready_at <= now) return it;
    next = std::min(next, it->ready_at);
  }
  return queue.end();
}

// The delivery thread of `rank`: hands envelopes to the handlers, without the mesh lock held.
void deliver(InProcMesh& mesh, std::size_t rank) {
  Mailbox& box = mesh.boxes[rank];
  std::unique_lock lock(mesh.mutex);
  for (;;) {
    mesh.changed.wait(lock,
                      [&] { return !box.queue.empty() || box.state == Mailbox::State::kGone; });
    if (box.queue.empty()) return;  // gone, and drained
    auto next = std::chrono::steady_clock::time_point::max();
    const auto ready =
        next_ready(box.queue, mesh.boxes.size(), std::chrono::steady_clock::now(), next);
    if (ready == box.queue.end()) {  // only messages still on a slow link
      mesh.changed.wait_until(lock, next);
      continue;
    }
    Envelope envelope = std::move(*ready);
    box.queue.erase(ready);
    lock.unlock();
    if (envelope.failure) {
      if (box.on_failure) box.on_failure(*envelope.failure);
    } else {
      const std::size_t wire = envelope.wire;
      // As a socket read: an owned copy of the bytes; the sender's reference goes now.
      envelope.message.payload = Payload::copy_of(envelope.message.payload.bytes());
      box.counters->add_read_bytes(wire);
      box.counters->add_received(envelope.from, envelope.message.lane, wire, 1);
      if (box.on_message) {
        try {
          box.on_message(envelope.from, std::move(envelope.message));
        } catch (const std::exception& e) {
          box.counters->add_malformed_frame();
          spdlog::warn("inproc rank {}: the message handler threw on a message from rank {}: {}",
                       rank, envelope.from, e.what());
        }
      }
    }
    lock.lock();
  }
}

}  // namespace

InProcTransport::InProcTransport(std::shared_ptr<detail::InProcMesh> mesh, std::size_t rank)
    : mesh_(std::move(mesh)), rank_(rank) {
  GRADMESH_CHECK(mesh_ != nullptr, "InProcTransport needs a mesh");
  GRADMESH_CHECK_LT(rank_, mesh_->boxes.size(), "InProcTransport rank out of range");
}

InProcTransport::~InProcTransport() { close(); }

std::size_t InProcTransport::size() const noexcept { return mesh_->boxes.size(); }

std::string InProcTransport::peer_address(std::size_t rank) const {
  GRADMESH_CHECK_LT(rank, mesh_->boxes.size(), "peer_address() of a rank outside the mesh");
  return "in-process rank " + std::to_string(rank);
}

void InProcTransport::set_handlers(MessageHandler on_message, FailureHandler on_failure) {
  const std::lock_guard lock(mesh_->mutex);
  Mailbox& box = mesh_->boxes[rank_];
  box.on_message = std::move(on_message);
  box.on_failure = std::move(on_failure);
}

void InProcTransport::start() {
  const std::lock_guard lock(mesh_->mutex);
  Mailbox& box = mesh_->boxes[rank_];
  if (box.state != Mailbox::State::kIdle) throw Error("InProcTransport::start() called twice");
  box.state = Mailbox::State::kRunning;
  box.thread = std::thread([mesh = mesh_.get(), rank = rank_] { deliver(*mesh, rank); });
}

void InProcTransport::send(std::size_t to_rank, Message message) {
  InProcMesh& mesh = *mesh_;
  GRADMESH_CHECK_LT(to_rank, mesh.boxes.size(), "send() to a rank outside the mesh");
  GRADMESH_CHECK_NE(to_rank, rank_, "send() to this node's own rank");
  GRADMESH_CHECK_LT(std::size_t{message.lane}, mesh.lanes.size(), "send() with an unknown lane");
  const std::size_t wire = encode_data(message)->wire_bytes();
  const std::size_t lane = message.lane;
  {
    const std::lock_guard lock(mesh.mutex);
    const Mailbox& self = mesh.boxes[rank_];
    if (self.state == Mailbox::State::kIdle || self.state == Mailbox::State::kGone) {
      throw Error("InProcTransport::send() to rank " + std::to_string(to_rank) +
                  (self.state == Mailbox::State::kIdle ? " before start()" : " after close()"));
    }
    Mailbox& peer = mesh.boxes[to_rank];
    if (self.cut[to_rank]) throw InProcMesh::cut_of(to_rank);
    if (peer.failed) throw mesh.failure_of(to_rank);
    if (peer.state == Mailbox::State::kGone) {
      throw PeerError(to_rank, InProcMesh::address(to_rank), "has shut down");
    }
    auto ready_at = std::chrono::steady_clock::now();
    Mailbox& me = mesh.boxes[rank_];
    if (const double rate = me.link_rate[to_rank]; rate > 0) {
      ready_at = std::max(ready_at, me.link_free_at[to_rank]) +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(static_cast<double>(wire) / rate));
      me.link_free_at[to_rank] = ready_at;
    }
    if (const double latency = me.link_latency[to_rank]; latency > 0) {
      ready_at += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(latency));
    }
    peer.queue.push_back(Envelope{rank_, std::move(message), std::nullopt, wire, ready_at});
  }
  mesh.boxes[rank_].counters->add_sent(to_rank, lane, wire, 1);
  mesh.changed.notify_all();
}

void InProcTransport::set_lane_weights(std::vector<double> weights) {
  check_lane_weights(weights, mesh_->lanes.size());
  const std::lock_guard lock(mesh_->mutex);
  mesh_->boxes[rank_].lane_weights = std::move(weights);
}

std::vector<double> InProcTransport::lane_weights() const {
  const std::lock_guard lock(mesh_->mutex);
  return mesh_->boxes[rank_].lane_weights;
}

void InProcTransport::shutdown(double timeout_s) noexcept {
  InProcMesh& mesh = *mesh_;
  {
    std::unique_lock lock(mesh.mutex);
    Mailbox& box = mesh.boxes[rank_];
    if (box.state == Mailbox::State::kRunning) {
      box.state = Mailbox::State::kLeaving;
      mesh.changed.notify_all();
      // As TCP waits for every peer's Goodbye: until each peer is leaving, gone or failed.
      mesh.changed.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
        for (std::size_t r = 0; r < mesh.boxes.size(); ++r) {
          if (r != rank_ && box.cut[r] == 0 && mesh.boxes[r].state == Mailbox::State::kRunning)
            return false;
        }
        return true;
      });
    }
  }
  leave(true, {});
}

void InProcTransport::close() noexcept { leave(false, "connection closed without goodbye"); }

void InProcTransport::abort_for(const std::string& reason,
                                std::optional<std::size_t> /*failed_peer*/) noexcept {
  leave(false, "aborted the job: " + reason);
}

void InProcTransport::leave(bool clean, const std::string& reason) noexcept {
  InProcMesh& mesh = *mesh_;
  std::thread thread;
  {
    const std::lock_guard lock(mesh.mutex);
    Mailbox& box = mesh.boxes[rank_];
    if (box.state == Mailbox::State::kGone) return;
    const bool was_live = box.state != Mailbox::State::kIdle;
    box.state = Mailbox::State::kGone;
    if (!clean) box.queue.clear();  // an abrupt close delivers nothing more
    if (!clean && was_live) {
      box.failed = true;
      box.failure_reason = reason;
      for (std::size_t r = 0; r < mesh.boxes.size(); ++r) {
        Mailbox& peer = mesh.boxes[r];
        if (r == rank_ || peer.state == Mailbox::State::kGone || box.cut[r] != 0) continue;
        // Behind what this rank sent before (per-peer order), whatever its links' rates.
        peer.queue.push_back(Envelope{rank_, Message{}, mesh.failure_of(rank_), 0,
                                      std::chrono::steady_clock::now()});
      }
    }
    thread = std::move(box.thread);
  }
  mesh.changed.notify_all();
  if (thread.joinable()) thread.join();
}

void InProcTransport::set_link_rate(std::size_t to_rank, double bytes_per_second) {
  GRADMESH_CHECK_LT(to_rank, mesh_->boxes.size(), "set_link_rate() to a rank outside the mesh");
  GRADMESH_CHECK_NE(to_rank, rank_, "set_link_rate() to this node's own rank");
  GRADMESH_CHECK(std::isfinite(bytes_per_second) && bytes_per_second >= 0,
                 "set_link_rate(): " + std::to_string(bytes_per_second) + " bytes/s");
  const std::lock_guard lock(mesh_->mutex);
  mesh_->boxes[rank_].link_rate[to_rank] = bytes_per_second;
}

void InProcTransport::set_link_latency(std::size_t to_rank, double seconds) {
  GRADMESH_CHECK_LT(to_rank, mesh_->boxes.size(), "set_link_latency() to a rank outside the mesh");
  GRADMESH_CHECK_NE(to_rank, rank_, "set_link_latency() to this node's own rank");
  GRADMESH_CHECK(std::isfinite(seconds) && seconds >= 0,
                 "set_link_latency(): " + std::to_string(seconds) + " s");
  const std::lock_guard lock(mesh_->mutex);
  mesh_->boxes[rank_].link_latency[to_rank] = seconds;
}

void InProcTransport::cut_link(std::size_t to_rank) {
  InProcMesh& mesh = *mesh_;
  GRADMESH_CHECK_LT(to_rank, mesh.boxes.size(), "cut_link() to a rank outside the mesh");
  GRADMESH_CHECK_NE(to_rank, rank_, "cut_link() to this node's own rank");
  {
    const std::lock_guard lock(mesh.mutex);
    Mailbox& me = mesh.boxes[rank_];
    Mailbox& peer = mesh.boxes[to_rank];
    if (me.cut[to_rank] != 0) return;
    me.cut[to_rank] = 1;
    peer.cut[rank_] = 1;
    const auto now = std::chrono::steady_clock::now();
    // Each side loses what the other sent and has not delivered, then learns the link is gone
    // (unless it is gone itself, or already holds the other's failure).
    const auto cut_side = [&](Mailbox& box, std::size_t other) {
      std::erase_if(box.queue, [&](const Envelope& e) { return e.from == other && !e.failure; });
      if (box.state != Mailbox::State::kGone && !mesh.boxes[other].failed)
        box.queue.push_back(Envelope{other, Message{}, InProcMesh::cut_of(other), 0, now});
    };
    cut_side(me, to_rank);
    cut_side(peer, rank_);
  }
  mesh.changed.notify_all();
}

Counters InProcTransport::counters() const { return mesh_->boxes[rank_].counters->snapshot(); }

std::vector<std::unique_ptr<InProcTransport>> make_inproc_mesh(std::size_t ranks,
                                                               std::vector<std::string> lanes) {
  GRADMESH_CHECK_GT(ranks, std::size_t{0}, "an in-process mesh needs at least one rank");
  GRADMESH_CHECK_LT(lanes.size(), std::size_t{255}, "too many lanes");
  auto mesh = std::make_shared<InProcMesh>(ranks, std::move(lanes));
  std::vector<std::unique_ptr<InProcTransport>> transports;
  for (std::size_t r = 0; r < ranks; ++r) {
    transports.push_back(std::make_unique<InProcTransport>(mesh, r));
  }
  return transports;
}

}  // namespace gradmesh::net
