// Dialing one peer (net/tcp/dialer.h): each address tried in turn (RFC 8305's staggered
// attempts), retried with back-off until connected; the winning connection goes to the transport,
// which starts the handshake on it.
#include "net/tcp/dialer.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "net/tcp/text.h"

namespace gradmesh::net::tcp {

using detail::Connection;

Dialer::Dialer(DialerOwner& owner, std::mutex& errors_mutex, std::size_t self_rank,
               std::size_t rank, const std::vector<ResolvedAddress>& addresses)
    : owner_(owner),
      errors_mutex_(errors_mutex),
      self_rank_(self_rank),
      rank_(rank),
      addresses_(addresses),
      errors_(addresses.size()) {}

void Dialer::open(uv_loop_t* loop) noexcept {
  uv_timer_init(loop, &retry_timer_);
  retry_timer_.data = this;
  uv_timer_init(loop, &attempt_timer_);
  attempt_timer_.data = this;
  opened_ = true;
}

void Dialer::close() noexcept {
  if (opened_) {
    for (uv_timer_t* timer : {&retry_timer_, &attempt_timer_}) {
      auto* handle = reinterpret_cast<uv_handle_t*>(timer);
      if (!uv_is_closing(handle)) uv_close(handle, nullptr);
    }
  }
  for (Connection* attempt : attempts_) owner_.close_connection(*attempt);
  attempts_.clear();
}

void Dialer::dial() noexcept {
  if (owner_.stopping()) return;
  next_address_ = 0;
  try_next_address();
}

void Dialer::try_next_address() noexcept {
  while (!owner_.stopping() && next_address_ < addresses_.size()) {
    const std::size_t index = next_address_++;
    Connection* connection = owner_.make_dial_connection(rank_);
    connection->dial_address = index;
    const int rc =
        connection->connect(reinterpret_cast<const sockaddr*>(&addresses_[index].socket_address));
    if (rc == 0) {
      attempts_.push_back(connection);
      if (next_address_ < addresses_.size())
        uv_timer_start(&attempt_timer_, &Dialer::on_attempt_delay, kAttemptDelayMs, 0);
      return;
    }
    note_error(index, uv_error_text(rc));
    owner_.close_connection(*connection);
  }
  if (!owner_.stopping() && attempts_.empty()) schedule_retry();
}

void Dialer::on_attempt_delay(uv_timer_t* timer) noexcept {
  static_cast<Dialer*>(timer->data)->try_next_address();
}

void Dialer::note_error(std::size_t address, const std::string& why) noexcept {
  spdlog::debug("net rank {}: cannot connect to rank {} at {}: {}", self_rank_, rank_,
                addresses_[address].text, why);
  const std::lock_guard lock(errors_mutex_);
  errors_[address] = why;
}

std::string Dialer::errors_locked() const {
  std::string text;
  for (std::size_t i = 0; i < errors_.size(); ++i) {
    if (errors_[i].empty()) continue;
    text += (text.empty() ? "" : "; ") + addresses_[i].text + ": " + errors_[i];
  }
  return text;
}

void Dialer::schedule_retry() noexcept {
  if (owner_.stopping()) return;
  uv_timer_start(&retry_timer_, &Dialer::on_retry, backoff_ms_, 0);
  backoff_ms_ = std::min(backoff_ms_ * 2, kMaxBackoffMs);
}

void Dialer::on_retry(uv_timer_t* timer) noexcept { static_cast<Dialer*>(timer->data)->dial(); }

bool Dialer::connected(Connection& connection, int status) noexcept {
  std::erase(attempts_, &connection);
  if (status != 0) {
    note_error(connection.dial_address, uv_error_text(status));
    owner_.close_connection(connection);
    if (next_address_ < addresses_.size()) {  // RFC 8305 sec. 5: the next one at once
      uv_timer_stop(&attempt_timer_);
      try_next_address();
    } else if (attempts_.empty()) {
      schedule_retry();
    }
    return false;
  }
  // This address won the race: the others go.
  uv_timer_stop(&attempt_timer_);
  for (Connection* other : attempts_) owner_.close_connection(*other);
  attempts_.clear();
  next_address_ = addresses_.size();
  return true;
}

}  // namespace gradmesh::net::tcp
