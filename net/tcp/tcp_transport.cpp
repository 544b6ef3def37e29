// TcpTransport: construction and the public facade (net/tcp/mesh_impl.h has the map).
#include "net/tcp/mesh_impl.h"

namespace gradmesh::net {

using namespace tcp;

// ====================================================================== construction

TcpTransport::Impl::Impl(TransportOptions options)
    : options_(std::move(options)),
      lane_names_(options_.lanes),
      control_lane_(options_.lanes.size()),
      counters_(options_.peers.size(),
                [&] {
                  auto names = options_.lanes;
                  names.emplace_back(kControlLane);
                  return names;
                }()),
      peers_(options_.peers.size()),
      listener_(*this, options_.rank, options_.peers.size(), options_.handshake_timeout_s),
      send_queue_(options_.lanes.size() + 1),
      liveness_(*this, peers_, options_.rank, options_.peer_timeout_s, control_lane_, counters_),
      authenticator_(*this, options_.secret, options_.encrypt, options_.job_name, options_.rank,
                     options_.rejoin, control_lane_, peers_, counters_) {
  lane_names_.emplace_back(kControlLane);
  for (std::size_t r = 0; r < peers_.size(); ++r)
    peers_[r].set_address(options_.peers[r].to_string());
}

TcpTransport::Impl::~Impl() { stop_and_join(); }

detail::ReadLimits TcpTransport::Impl::limits(bool handshake, bool authenticated) const noexcept {
  return {options_.max_frame_bytes, options_.lanes.size(), handshake,
          authenticated ? detail::kMaxHandshakeHeaderBytes : detail::kMaxPreAuthHeaderBytes};
}

HelloFields TcpTransport::Impl::our_hello() const {
  HelloFields hello;
  hello.rank = options_.rank;
  hello.job_name = options_.job_name;
  hello.config_hash = options_.config_hash;
  hello.config_text = options_.config_text;
  hello.view = options_.view;
  hello.rejoin = options_.rejoin;
  for (const auto& peer : peers_) hello.peers.push_back(peer.address());
  return hello;
}

std::size_t TcpTransport::Impl::count_connected_locked() const noexcept {
  return static_cast<std::size_t>(std::count_if(
      peers_.begin(), peers_.end(), [](const tcp::PeerLink& p) { return p.connected_locked(); }));
}

std::size_t TcpTransport::Impl::count_done_locked() const noexcept {
  return static_cast<std::size_t>(std::count_if(
      peers_.begin(), peers_.end(), [](const tcp::PeerLink& p) { return p.done_locked(); }));
}

// ====================================================================== Transport

namespace {

TransportOptions validated(TransportOptions options) {
  if (options.peers.empty()) throw ConfigError("transport: peers is empty; expected >= 1 endpoint");
  if (options.rank >= options.peers.size())
    throw ConfigError("transport: rank " + std::to_string(options.rank) +
                      " out of range; expected < " + std::to_string(options.peers.size()) +
                      " (the number of peers)");
  for (std::size_t r = 0; r < options.peers.size(); ++r) {
    if (options.peers[r].host.empty())
      throw ConfigError("transport: peers[" + std::to_string(r) + "] has an empty host");
    for (std::size_t q = 0; q < r; ++q)
      if (options.peers[q] == options.peers[r])
        throw ConfigError("transport: peers[" + std::to_string(q) + "] and peers[" +
                          std::to_string(r) + "] are both " + options.peers[r].to_string());
  }
  if (!(options.connect_timeout_s > 0.0) || !std::isfinite(options.connect_timeout_s))
    throw ConfigError(
        "transport: connect_timeout_s = " + std::to_string(options.connect_timeout_s) +
        "; expected a finite number of seconds > 0");
  if (!(options.handshake_timeout_s > 0.0) || !std::isfinite(options.handshake_timeout_s))
    throw ConfigError(
        "transport: handshake_timeout_s = " + std::to_string(options.handshake_timeout_s) +
        "; expected a finite number of seconds > 0");
  if (options.max_frame_bytes < 1024)
    throw ConfigError("transport: max_frame_bytes = " + std::to_string(options.max_frame_bytes) +
                      "; expected >= 1024");
  if (options.lanes.size() > 255)
    throw ConfigError("transport: " + std::to_string(options.lanes.size()) +
                      " lanes; expected at most 255");
  for (const auto& lane : options.lanes)
    if (lane == kControlLane)
      throw ConfigError("transport: lane name \"control\" is reserved for the transport");
  if (options.max_send_rate < 0.0 || !std::isfinite(options.max_send_rate))
    throw ConfigError("transport: max_send_rate = " + std::to_string(options.max_send_rate) +
                      "; expected bytes/s >= 0 (0 = unlimited)");
  if (options.peer_timeout_s < 0.0 || !std::isfinite(options.peer_timeout_s))
    throw ConfigError("transport: peer_timeout_s = " + std::to_string(options.peer_timeout_s) +
                      "; expected a finite number of seconds >= 0 (0 = no heartbeats)");
  return options;
}

}  // namespace

TcpTransport::TcpTransport(TransportOptions options)
    : impl_(std::make_unique<Impl>(validated(std::move(options)))) {}

TcpTransport::~TcpTransport() = default;

void TcpTransport::set_handlers(MessageHandler on_message, FailureHandler on_failure) {
  impl_->on_message_ = std::move(on_message);
  impl_->on_failure_ = std::move(on_failure);
}

void TcpTransport::set_rejoin_handler(RejoinHandler on_rejoin) {
  impl_->on_rejoin_ = std::move(on_rejoin);
}

void TcpTransport::start() { impl_->start(); }

void TcpTransport::send(std::size_t to_rank, Message message) {
  impl_->check_rank(to_rank);
  GRADMESH_CHECK_LT(std::size_t{message.lane}, impl_->options_.lanes.size(),
                    "Message::lane must index TransportOptions::lanes");
  impl_->enqueue_from_caller(to_rank, encode_data(message));
}

void TcpTransport::send_raw_for_testing(std::size_t to_rank, std::span<const std::byte> bytes) {
  impl_->check_rank(to_rank);
  GRADMESH_CHECK(!bytes.empty(), "send_raw_for_testing() needs at least one byte");
  impl_->enqueue_from_caller(to_rank, OutgoingFrame::raw(bytes, impl_->control_lane_));
}

void TcpTransport::pause_reading_for_testing(std::size_t rank, bool paused) {
  impl_->check_rank(rank);
  impl_->pause_reading(rank, paused);
}

void TcpTransport::set_link_rates(std::vector<double> bytes_per_second) {
  impl_->set_link_rates(std::move(bytes_per_second));
}

std::size_t TcpTransport::fragment_bytes(std::size_t rank) const {
  return impl_->fragment_bytes(rank);
}

void TcpTransport::set_lane_weights(std::vector<double> weights) {
  impl_->set_lane_weights(std::move(weights));
}

void TcpTransport::shutdown(double timeout_s) noexcept { impl_->shutdown(timeout_s); }

void TcpTransport::close() noexcept { impl_->stop_and_join(); }

void TcpTransport::abort_for(const std::string& reason,
                             std::optional<std::size_t> failed_peer) noexcept {
  impl_->abort(reason, failed_peer);
}

void TcpTransport::Impl::abort(const std::string& reason,
                               std::optional<std::size_t> failed_peer) noexcept {
  {
    std::unique_lock lock(mutex_);
    if (!closed_ && loop_initialised_ && started_ && loop_accepts_ && !stop_requested_) {
      sends_allowed_ = false;
      for (std::size_t r = 0; r < peers_.size(); ++r) {
        if (r == options_.rank || peers_[r].failure_locked() || peers_[r].done_locked()) continue;
        try {
          if (incoming_.empty()) incoming_since_ = RateLimiter::steady_seconds();
          incoming_.emplace_back(r, encode_abort(reason, control_lane_, failed_peer));
          ++aborts_pending_;
        } catch (...) {
          // Out of memory: that peer learns of the failure from the closed connection.
        }
      }
      uv_async_send(&async_);
      changed_.wait_for(lock, std::chrono::seconds(1), [&] { return aborts_pending_ == 0; });
    }
  }
  stop_and_join();
}

Counters TcpTransport::counters() const { return impl_->counters_.snapshot(); }

std::size_t TcpTransport::rank() const noexcept { return impl_->options_.rank; }

std::size_t TcpTransport::size() const noexcept { return impl_->options_.peers.size(); }

std::string TcpTransport::peer_address(std::size_t rank) const {
  GRADMESH_CHECK_LT(rank, impl_->options_.peers.size(), "peer_address() of a rank outside the job");
  return impl_->options_.peers[rank].to_string();
}

}  // namespace gradmesh::net
