#include "net/tcp/connection.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <optional>

#include "net/tcp/resolve.h"

namespace gradmesh::net::detail {

int Connection::set_reading_paused(bool paused) noexcept {
  return paused ? uv_read_stop(stream())
                : uv_read_start(stream(), &Connection::on_alloc, &Connection::on_read);
}

namespace {
constexpr std::size_t kDiscardBytes = 64 * 1024;
}  // namespace

Connection* Connection::make(uv_loop_t* loop, ConnectionListener& listener, Role role,
                             std::size_t peer_rank, ReadLimits limits) {
  return new Connection(loop, listener, role, peer_rank, limits);
}

Connection::Connection(uv_loop_t* loop, ConnectionListener& listener, Role role,
                       std::size_t peer_rank, ReadLimits limits)
    : listener_(listener), role_(role), peer_rank_(peer_rank), limits_(limits) {
  uv_tcp_init(loop, &tcp_);  // cannot fail for a valid loop
  tcp_.data = this;
  connect_request_.data = this;
}

Connection::~Connection() = default;  // queued frames go with queue_ and current_

int Connection::connect(const sockaddr* address) noexcept {
  return uv_tcp_connect(&connect_request_, &tcp_, address, &Connection::on_connect);
}

void Connection::on_connect(uv_connect_t* request, int status) noexcept {
  auto* self = static_cast<Connection*>(request->data);
  if (self->closing_) return;
  self->listener_.on_connected(*self, status);
}

int Connection::start_reading() noexcept {
  uv_tcp_nodelay(&tcp_, 1);
  begin_prefix();
  return uv_read_start(stream(), &Connection::on_alloc, &Connection::on_read);
}

namespace {

// The remote end of `tcp`, or nothing when it has none (closed, never connected).
std::optional<sockaddr_storage> peer_name(const uv_tcp_t& tcp) {
  sockaddr_storage storage{};
  int length = sizeof(storage);
  if (uv_tcp_getpeername(&tcp, reinterpret_cast<sockaddr*>(&storage), &length) != 0)
    return std::nullopt;
  return storage;
}

}  // namespace

std::string Connection::remote_address() const {
  const auto name = peer_name(tcp_);
  return name ? tcp::address_text(*name) : std::string("unknown");
}

std::string Connection::remote_ip_address() const {
  const auto name = peer_name(tcp_);
  return name ? tcp::ip_text(*name) : std::string("unknown");
}

// ---------------------------------------------------------------- reader

void Connection::begin_prefix() noexcept {
  read_state_ = ReadState::kPrefix;
  filled_ = 0;
}

void Connection::on_alloc(uv_handle_t* handle, std::size_t /*suggested*/,
                          uv_buf_t* buffer) noexcept {
  auto* self = static_cast<Connection*>(handle->data);
  char* base = nullptr;
  std::size_t length = 0;
  switch (self->read_state_) {
    case ReadState::kPrefix:
      base = reinterpret_cast<char*>(self->prefix_bytes_.data()) + self->filled_;
      length = kPrefixBytes - self->filled_;
      break;
    case ReadState::kHeader: {
      auto& header = self->header_;
      if (self->filled_ == header.size()) {  // full: room for the next bytes, at most doubled
        const std::size_t grown = std::max(header.size() * 2, kHeaderGrowthBytes);
        header.resize(std::min(self->header_target_, grown));
      }
      base = reinterpret_cast<char*>(header.data()) + self->filled_;
      length = std::min(self->header_target_, header.size()) - self->filled_;
      break;
    }
    case ReadState::kPayload: {
      // The rest of the frame's region (its own payload, or its part of a cut message's):
      // bytes land where they stay.
      base = reinterpret_cast<char*>(self->region_.data()) + self->filled_;
      length = self->region_.size() - self->filled_;
      break;
    }
    case ReadState::kTag:
      base = reinterpret_cast<char*>(self->payload_tag_.data()) + self->filled_;
      length = auth::kTagBytes - self->filled_;
      break;
    case ReadState::kDiscard:
      if (self->discard_.empty()) self->discard_.resize(kDiscardBytes);
      base = reinterpret_cast<char*>(self->discard_.data());
      length = std::min(kDiscardBytes, self->discard_target_ - self->filled_);
      break;
  }
  *buffer = uv_buf_init(base, static_cast<unsigned>(length));
}

void Connection::on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* /*buffer*/) noexcept {
  auto* self = static_cast<Connection*>(stream->data);
  if (self->closing_ || nread == 0) return;
  if (nread < 0) {
    const int status = static_cast<int>(nread);
    self->broken(status,
                 status == UV_EOF
                     ? std::string("connection closed unexpectedly (the peer stopped, or closed "
                                   "it on a frame it could not verify or parse: its log says "
                                   "which)")
                     : std::string(uv_err_name(status)) + ": " + uv_strerror(status));
    return;
  }
  self->listener_.on_bytes_read(*self, static_cast<std::size_t>(nread));
  if (self->closing_) return;
  self->filled_ += static_cast<std::size_t>(nread);
  self->advance();
}

void Connection::advance() noexcept {
  while (!closing_) {
    switch (read_state_) {
      case ReadState::kPrefix: {
        if (filled_ < kPrefixBytes) return;
        prefix_ = decode_prefix(prefix_bytes_);
        if (std::string why = check_prefix(prefix_, limits_.max_frame_bytes, limits_.handshake,
                                           limits_.max_handshake_header_bytes);
            !why.empty()) {
          broken(0, why);
          return;
        }
        const std::size_t tag = opener_ ? auth::kTagBytes : 0;
        header_target_ = prefix_.header_bytes + tag;
        frame_wire_ = static_cast<std::size_t>(prefix_.frame_bytes()) + tag +
                      (prefix_.payload_bytes > 0 ? tag : 0);
        // Sized to what arrives (on_alloc grows it), not to what the prefix announces.
        if (const std::size_t first = std::min(header_target_, kHeaderGrowthBytes);
            header_.size() < first)
          header_.resize(first);
        read_state_ = ReadState::kHeader;
        filled_ = 0;
        break;
      }
      case ReadState::kHeader:
        if (filled_ < header_target_) return;
        filled_ = 0;
        if (!take_header()) return;
        break;
      case ReadState::kPayload:
        if (filled_ < prefix_.payload_bytes) return;
        filled_ = 0;
        if (opener_ && prefix_.payload_bytes > 0) {
          read_state_ = ReadState::kTag;  // the payload's tag follows it
          break;
        }
        if (!take_payload()) return;
        break;
      case ReadState::kTag:
        if (filled_ < auth::kTagBytes) return;
        filled_ = 0;
        if (!take_payload()) return;
        break;
      case ReadState::kDiscard: {
        if (filled_ < discard_target_) return;
        begin_prefix();
        listener_.on_malformed(*this, malformed_why_, frame_wire_);
        break;
      }
    }
  }
}

bool Connection::take_header() noexcept {
  const std::span<std::byte> bytes(header_.data(), prefix_.header_bytes);
  try {
    if (opener_ && !opener_->open(prefix_bytes_, bytes, bytes,
                                  std::span<const std::byte, auth::kTagBytes>(
                                      header_.data() + prefix_.header_bytes, auth::kTagBytes))) {
      listener_.on_unverified(*this, "a frame's " + std::to_string(prefix_.header_bytes) +
                                         "-byte header did not verify (altered, forged, replayed "
                                         "or not encrypted)");
      return false;
    }
    const HeaderCheck check = verify_header(bytes, limits_.data_lane_count);
    if (check.header == nullptr) {
      // An authenticated peer's malformed frame: its payload is skipped unread (and its message
      // counter with it), so the stream stays in sync.
      if (opener_ && prefix_.payload_bytes > 0) opener_->skip();
      malformed_why_ = check.error;
      discard_target_ = frame_wire_ - kPrefixBytes - header_target_;
      read_state_ = ReadState::kDiscard;
      return true;
    }
    if (!begin_payload(*check.header)) return false;  // broken
  } catch (const std::exception& e) {                 // the message counter spent
    broken(0, e.what());
    return false;
  }
  read_state_ = ReadState::kPayload;
  return true;
}

bool Connection::take_payload() noexcept {
  if (opener_ && prefix_.payload_bytes > 0) {
    try {
      if (!opener_->open({}, region_, region_, payload_tag_)) {
        listener_.on_unverified(*this, "a frame's " + std::to_string(prefix_.payload_bytes) +
                                           "-byte payload did not verify (altered, forged, "
                                           "replayed or not encrypted)");
        return false;
      }
    } catch (const std::exception& e) {  // the message counter spent
      broken(0, e.what());
      return false;
    }
  }
  const std::size_t wire = frame_wire_;
  begin_prefix();
  if (fragment_) {
    fragment_ = false;
    assembled_ += prefix_.payload_bytes;
    assembly_wire_ += wire;
    if (assembled_ < assembly_.size()) return true;  // more fragments to come
    const auto* header = schema::GetHeader(assembly_header_.data());
    listener_.on_frame(*this, *header, std::move(assembly_), assembly_wire_);
    assembly_ = Payload();
    assembly_header_.clear();  // keeps its capacity
    return true;
  }
  const auto* header = schema::GetHeader(header_.data());
  listener_.on_frame(*this, *header, std::move(payload_), wire);
  payload_ = Payload();
  return true;
}

bool Connection::begin_payload(const schema::Header& header) noexcept {
  const std::size_t bytes = prefix_.payload_bytes;
  const bool assembling = !assembly_header_.empty();
  const auto fault = [&](const std::string& why) {
    broken(0, why);
    return false;
  };
  try {
    if (header.body_type() == schema::Body::Data) {
      const std::uint64_t total = header.body_as_Data()->message_bytes();
      if (assembling)
        return fault("a Data frame came between the fragments of a cut message (" +
                     std::to_string(assembled_) + " of its " + std::to_string(assembly_.size()) +
                     " bytes read)");
      // The first fragment of a cut message; never before the handshake (a stranger's Data is
      // refused unread, and must not make this node allocate what it announces).
      if (total > bytes && !limits_.handshake) {
        if (total > limits_.max_frame_bytes)
          return fault("a cut message announces " + std::to_string(total) +
                       " payload bytes, more than max_frame_bytes " +
                       std::to_string(limits_.max_frame_bytes));
        assembly_ = Payload::allocate(total);
        assembly_header_.assign(
            header_.begin(), header_.begin() + static_cast<std::ptrdiff_t>(prefix_.header_bytes));
        assembled_ = assembly_wire_ = 0;
        fragment_ = true;
      }
    } else if (header.body_type() == schema::Body::DataMore) {
      if (!assembling) return fault("a DataMore frame without a cut message in progress");
      if (bytes == 0 || assembled_ + bytes > assembly_.size())
        return fault("a DataMore frame of " + std::to_string(bytes) + " bytes where " +
                     std::to_string(assembly_.size() - assembled_) + " of the message remain");
      fragment_ = true;
    }
    if (fragment_) {
      region_ = assembly_.mutable_bytes().subspan(assembled_, bytes);
    } else {
      payload_ = bytes > 0 ? Payload::allocate(bytes) : Payload();
      region_ = bytes > 0 ? payload_.mutable_bytes() : std::span<std::byte>();
    }
  } catch (const std::exception& e) {  // std::bad_alloc
    return fault("cannot take a " + std::to_string(bytes) + "-byte payload: " + e.what());
  }
  return true;
}

void Connection::broken(int status, const std::string& why) noexcept {
  if (closing_) return;
  listener_.on_broken(*this, status, why);
}

void Connection::close() noexcept {
  if (closing_) return;
  closing_ = true;
  for (std::unique_ptr<OutgoingFrame>* started : {&current_, &interrupted_}) {
    if (*started && (*started)->writes_in_flight > 0) {
      // Partly written: its in-flight writes still point at it; the last (cancelled) one
      // deletes it.
      (*started)->detached = true;
      started->release();
    }
    started->reset();
  }
  queue_.clear();
  if (!uv_is_closing(reinterpret_cast<uv_handle_t*>(&tcp_)))
    uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), &Connection::on_close);
}

void Connection::on_close(uv_handle_t* handle) noexcept {
  delete static_cast<Connection*>(handle->data);
}

}  // namespace gradmesh::net::detail
