#include "sync/channel.h"

#include <spdlog/spdlog.h>

#include "net/frame.h"
#include "net/transport.h"

namespace gradmesh::sync {

StageId stage_id(std::string_view name) {
  const auto& names = stage_names();
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<StageId>(i);
  }
  throw ContractError("no strategy declares the sync stage \"" + std::string(name) + "\"");
}

double frame_overhead_bytes(StageId stage, std::uint16_t kind) {
  // Non-zero tags: FlatBuffers leaves out fields equal to their default, so 0s would under-count.
  const net::Message probe{stage, kind, 1, 1, net::Payload{}};
  return static_cast<double>(net::encode_data(probe)->wire_bytes());
}

Channel::Channel(net::Transport* transport, std::size_t rank, std::size_t nodes)
    : transport_(transport),
      rank_(rank),
      nodes_(nodes),
      handlers_(new std::atomic<Handler*>[stage_names().size()]),
      stages_(stage_names().size()) {
  for (std::size_t i = 0; i < stages_; ++i) handlers_[i].store(nullptr, std::memory_order_relaxed);
  if (transport_ == nullptr) return;
  transport_->set_handlers(
      [this](std::size_t from, net::Message&& message) { dispatch(from, std::move(message)); },
      [this](const PeerError& error) { fail(error); });
  transport_->set_rejoin_handler([this](std::size_t peer) { rejoined(peer); });
}

StageId Channel::route(std::string_view name, Handler handler) {
  const StageId id = stage_id(name);
  const std::lock_guard lock(mutex_);
  GRADMESH_CHECK(handlers_[id].load(std::memory_order_acquire) == nullptr,
                 "sync stage \"" + std::string(name) + "\" is routed twice");
  owned_.push_back(std::make_unique<Handler>(std::move(handler)));
  handlers_[id].store(owned_.back().get(), std::memory_order_release);
  return id;
}

void Channel::on_failure(FailureHandler handler) {
  const std::lock_guard lock(mutex_);
  failure_handlers_.push_back(std::make_shared<FailureHandler>(std::move(handler)));
}

std::optional<PeerError> Channel::send(std::size_t peer, net::Message message) {
  GRADMESH_CHECK(transport_ != nullptr, "Channel::send() without a transport");
  try {
    transport_->send(peer, std::move(message));
  } catch (const PeerError& error) {
    return error;
  }
  return std::nullopt;
}

void Channel::set_stage_weights(const std::map<std::string, double, std::less<>>& bytes_by_stage) {
  std::vector<double> weights(stages_, 0.0);
  for (const auto& [name, bytes] : bytes_by_stage) weights[stage_id(name)] = bytes;
  if (transport_ != nullptr) transport_->set_stage_weights(std::move(weights));
}

void Channel::set_link_rates(std::vector<double> bytes_per_second) {
  if (transport_ != nullptr) transport_->set_link_rates(std::move(bytes_per_second));
}

std::vector<PeerError> Channel::broadcast(const net::Message& message) {
  std::vector<PeerError> failed;
  for (std::size_t peer = 0; peer < nodes_; ++peer) {
    if (peer == rank_) continue;
    if (auto error = send(peer, message)) failed.push_back(std::move(*error));
  }
  return failed;
}

std::string Channel::address(std::size_t rank) const {
  return transport_ != nullptr ? transport_->peer_address(rank) : "rank " + std::to_string(rank);
}

void Channel::reject(std::size_t from, StageId stage, const std::string& why) {
  rejected_.fetch_add(1, std::memory_order_relaxed);
  const auto& names = stage_names();
  spdlog::warn("{}: rejected a message from rank {}: {}",
               stage < names.size() ? names[stage] : std::string("stage ") + std::to_string(stage),
               from, why);
}

std::uint64_t Channel::rejected() const noexcept {
  return rejected_.load(std::memory_order_relaxed);
}

void Channel::dispatch(std::size_t from, net::Message&& message) {
  Handler* handler =
      message.stage < stages_ ? handlers_[message.stage].load(std::memory_order_acquire) : nullptr;
  if (handler == nullptr) {
    reject(from, message.stage,
           "no scheme of this node's strategy owns this stage (kind " +
               std::to_string(message.kind) + ")");
    return;
  }
  (*handler)(from, std::move(message));
}

void Channel::on_rejoin(RejoinHandler handler) {
  const std::lock_guard lock(mutex_);
  rejoin_handlers_.push_back(std::make_shared<RejoinHandler>(std::move(handler)));
}

void Channel::rejoined(std::size_t rank) {
  std::vector<std::shared_ptr<RejoinHandler>> handlers;
  {
    const std::lock_guard lock(mutex_);
    handlers = rejoin_handlers_;
  }
  for (const auto& handler : handlers) (*handler)(rank);
}

void Channel::fail(const PeerError& error) {
  std::vector<std::shared_ptr<FailureHandler>> handlers;
  {
    const std::lock_guard lock(mutex_);
    handlers = failure_handlers_;
  }
  for (const auto& handler : handlers) (*handler)(error);
}

void throw_first(const std::vector<PeerError>& errors) {
  if (!errors.empty()) throw errors.front();
}

}  // namespace gradmesh::sync
