// The writing side of a Connection: frames queued, sealed when the connection seals, written
// a fragment at a time under the send scheduler's byte budget, completed by libuv.
#include "net/tcp/connection.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace gradmesh::net::detail {

void Connection::enqueue(std::unique_ptr<OutgoingFrame> frame) noexcept {
  try {
    if (sealer_ && !frame->is_raw()) frame->add_tags(auth::kTagBytes);
    queue_.push(std::move(frame));
  } catch (const std::bad_alloc&) {
    broken(0, "out of memory queuing a frame");
  }
}

namespace {

// Whether `frame` (cut into fragments) has issued a whole fragment and not yet started the next.
bool between_fragments(const OutgoingFrame& frame) noexcept {
  return frame.fragments() > 1 && frame.issued > 0 && frame.issued < frame.wire_bytes() &&
         frame.fragment_at(frame.issued).wire_begin == frame.issued;
}

}  // namespace

const OutgoingFrame* Connection::next_started() const noexcept {
  if (current_ != nullptr)
    return between_fragments(*current_) && queue_.has_control() ? nullptr : current_.get();
  if (interrupted_ != nullptr && !queue_.has_control()) return interrupted_.get();
  return nullptr;
}

std::size_t Connection::write_some(std::size_t max_bytes, std::size_t lane) noexcept {
  if (closing_ || max_bytes == 0) return 0;
  // A control frame goes between two fragments of a cut frame; then the cut frame goes on.
  if (current_ != nullptr && between_fragments(*current_) && queue_.has_control())
    interrupted_ = std::move(current_);
  if (current_ == nullptr && interrupted_ != nullptr && !queue_.has_control())
    current_ = std::move(interrupted_);
  if (current_ == nullptr) {
    current_ = queue_.pop(lane);  // with a frame set aside: its control frame (pop's first)
    if (current_ == nullptr) return 0;
    std::size_t cut = fragment_bytes_;
    if (current_->tag_bytes() > 0)
      cut = cut == 0 ? kMaxSealedFragmentBytes : std::min(cut, kMaxSealedFragmentBytes);
    if (cut > 0 && current_->role() == FrameRole::kData && current_->issued == 0)
      current_->fragment(cut);
  }
  OutgoingFrame& frame = *current_;
  const OutgoingFrame::Fragment piece = frame.fragment_at(frame.issued);
  const auto payload = frame.payload().bytes();
  const std::size_t n = std::min(max_bytes, piece.wire_end() - frame.issued);

  // Up to two windows over the frame's own memory: the rest of the fragment's head, then its
  // payload bytes; or, sealed, one over the fragment's chunk.
  uv_buf_t buffers[2];
  unsigned count = 0;
  std::size_t offset = frame.issued - piece.wire_begin;  // within the fragment
  std::size_t left = n;
  SealedChunk* chunk = nullptr;
  if (piece.tag_bytes > 0) {
    if (offset == 0) sealing_ = seal_fragment(frame, piece);
    if (sealing_ == nullptr) return 0;  // broken
    chunk = sealing_;
    buffers[count++] =
        uv_buf_init(reinterpret_cast<char*>(chunk->data.get() + offset), static_cast<unsigned>(n));
    if (offset + n == piece.wire_size()) sealing_ = nullptr;  // busy until its writes complete
    left = 0;
  } else if (offset < piece.head.size()) {
    const std::size_t take = std::min(left, piece.head.size() - offset);
    buffers[count++] =
        uv_buf_init(const_cast<char*>(reinterpret_cast<const char*>(piece.head.data() + offset)),
                    static_cast<unsigned>(take));
    offset += take;
    left -= take;
  }
  if (left > 0) {
    const std::size_t at = piece.payload_begin + (offset - piece.head.size());
    buffers[count++] =
        uv_buf_init(const_cast<char*>(reinterpret_cast<const char*>(payload.data() + at)),
                    static_cast<unsigned>(left));
  }

  std::unique_ptr<WriteRequest> request;
  if (free_requests_.empty()) {
    try {
      request = std::make_unique<WriteRequest>();
    } catch (const std::bad_alloc&) {
      broken(0, "out of memory issuing a write");
      return 0;
    }
  } else {
    request = std::move(free_requests_.back());
    free_requests_.pop_back();
  }
  frame.issued += n;
  const bool done = frame.issued == frame.wire_bytes();
  request->connection = this;
  request->frame = &frame;
  request->chunk = chunk;
  if (chunk != nullptr) ++chunk->writes_in_flight;
  request->bytes = n;
  request->frame_done = done;
  request->request.data = request.get();
  ++frame.writes_in_flight;
  if (done) current_.release();  // fully issued: the last write callback deletes it
  WriteRequest* raw = request.release();
  ++requests_in_flight_;
  const int rc = uv_write(&raw->request, stream(), buffers, count, &Connection::on_write);
  if (rc != 0) {
    // No callback will come: undo as the callback would, then report.
    on_write(&raw->request, rc);
  }
  return n;
}

Connection::SealedChunk* Connection::seal_fragment(const OutgoingFrame& frame,
                                                   const OutgoingFrame::Fragment& piece) noexcept {
  const std::size_t size = piece.wire_size();
  SealedChunk* chunk = nullptr;
  try {
    // A free chunk that is large enough, else the largest free one grown, else a new one.
    for (const auto& c : chunks_) {
      if (c->writes_in_flight > 0) continue;
      if (chunk == nullptr || (chunk->capacity < size && c->capacity > chunk->capacity) ||
          (c->capacity >= size && c->capacity < chunk->capacity))
        chunk = c.get();
    }
    if (chunk == nullptr) chunk = chunks_.emplace_back(std::make_unique<SealedChunk>()).get();
    if (chunk->capacity < size) {
      chunk->data.reset();  // its old bytes are not needed
      chunk->data.reset(new std::byte[size]);
      chunk->capacity = size;
    }
  } catch (const std::bad_alloc&) {
    broken(0, "out of memory sealing a " + std::to_string(size) + "-byte frame");
    return nullptr;
  }
  // prefix (clear, the header's associated data) | header | tag | payload | tag
  const auto prefix = piece.head.first(kPrefixBytes);
  const auto header = piece.head.subspan(kPrefixBytes);
  std::byte* out = chunk->data.get();
  std::memcpy(out, prefix.data(), prefix.size());
  out += prefix.size();
  const auto payload =
      frame.payload().bytes().subspan(piece.payload_begin, piece.payload_end - piece.payload_begin);
  try {
    sealer_->seal(prefix, header, {out, header.size()},
                  std::span<std::byte, auth::kTagBytes>(out + header.size(), auth::kTagBytes));
    out += header.size() + auth::kTagBytes;
    if (!payload.empty())
      sealer_->seal({}, payload, {out, payload.size()},
                    std::span<std::byte, auth::kTagBytes>(out + payload.size(), auth::kTagBytes));
  } catch (const std::exception& e) {  // the message counter spent
    broken(0, e.what());
    return nullptr;
  }
  return chunk;
}

void Connection::on_write(uv_write_t* request, int status) noexcept {
  auto* req = static_cast<WriteRequest*>(request->data);
  Connection* self = req->connection;
  OutgoingFrame* frame = req->frame;
  const std::size_t bytes = req->bytes;
  const bool done = req->frame_done;
  --self->requests_in_flight_;
  --frame->writes_in_flight;
  if (req->chunk != nullptr) --req->chunk->writes_in_flight;
  self->free_requests_.emplace_back(req);
  // Bytes that reached the socket count even when the connection is closing meanwhile (the peer's
  // EOF can be read before this callback runs); the listener skips state changes then.
  if (status == 0) self->listener_.on_written(*self, *frame, bytes, done);
  if ((done || frame->detached) && frame->writes_in_flight == 0) delete frame;
  if (status != 0 && status != UV_ECANCELED && !self->closing_) {
    self->broken(status, std::string(uv_err_name(status)) + ": " + uv_strerror(status));
  } else if (status == 0 && !self->closing_) {
    self->listener_.on_writable(*self);
  }
}

}  // namespace gradmesh::net::detail
