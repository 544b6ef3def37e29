#include "net/frame.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "engine/error.h"

namespace gradmesh::net {

namespace {

constexpr std::uint64_t kMaxU32 = std::numeric_limits<std::uint32_t>::max();

// One builder per thread, cleared per frame: after warm-up building a header allocates nothing.
flatbuffers::FlatBufferBuilder& thread_builder() {
  thread_local flatbuffers::FlatBufferBuilder builder(256);
  builder.Clear();
  return builder;
}

std::span<const std::uint8_t> finish(flatbuffers::FlatBufferBuilder& builder, schema::Body type,
                                     flatbuffers::Offset<void> body) {
  const auto header = schema::CreateHeader(builder, type, body);
  schema::FinishHeaderBuffer(builder, header);
  return {builder.GetBufferPointer(), builder.GetSize()};
}

}  // namespace

void encode_prefix(const FramePrefix& prefix, std::span<std::byte, kPrefixBytes> out) noexcept {
  for (std::size_t i = 0; i < 4; ++i) {
    out[i] = static_cast<std::byte>((prefix.header_bytes >> (8 * i)) & 0xffu);
    out[4 + i] = static_cast<std::byte>((prefix.payload_bytes >> (8 * i)) & 0xffu);
  }
}

std::string check_prefix(const FramePrefix& prefix, std::uint64_t max_frame_bytes, bool handshake,
                         std::size_t max_handshake_header_bytes) {
  if (prefix.frame_bytes() > max_frame_bytes) {
    return "frame prefix announces " + std::to_string(prefix.frame_bytes()) +
           " bytes, more than max_frame_bytes " + std::to_string(max_frame_bytes);
  }
  if (handshake &&
      (prefix.header_bytes > max_handshake_header_bytes || prefix.payload_bytes != 0)) {
    return "handshake frame prefix announces a " + std::to_string(prefix.header_bytes) +
           "-byte header and a " + std::to_string(prefix.payload_bytes) +
           "-byte payload (at most " + std::to_string(max_handshake_header_bytes) +
           " and 0 expected)";
  }
  return {};
}

FramePrefix decode_prefix(std::span<const std::byte, kPrefixBytes> in) noexcept {
  FramePrefix prefix;
  for (std::size_t i = 0; i < 4; ++i) {
    prefix.header_bytes |= std::to_integer<std::uint32_t>(in[i]) << (8 * i);
    prefix.payload_bytes |= std::to_integer<std::uint32_t>(in[4 + i]) << (8 * i);
  }
  return prefix;
}

OutgoingFrame::OutgoingFrame(std::size_t head_size, std::size_t lane, FrameRole role)
    : head_size_(head_size), lane_(lane), role_(role) {
  if (head_size_ > kInlineHeadBytes) large_head_.reset(new std::byte[head_size_]);
}

OutgoingFrame::OutgoingFrame(std::span<const std::uint8_t> header, Payload payload,
                             std::size_t lane, FrameRole role)
    : OutgoingFrame(kPrefixBytes + header.size(), lane, role) {
  if (header.size() > kMaxU32 || payload.size() > kMaxU32)
    throw ProtocolError("frame too large: header " + std::to_string(header.size()) +
                        " bytes, payload " + std::to_string(payload.size()) +
                        " bytes; each must be < 4 GiB");
  payload_ = std::move(payload);
  std::byte* out = head_data();
  encode_prefix(
      {static_cast<std::uint32_t>(header.size()), static_cast<std::uint32_t>(payload_.size())},
      std::span<std::byte, kPrefixBytes>(out, kPrefixBytes));
  std::memcpy(out + kPrefixBytes, header.data(), header.size());
}

namespace {

// The header of every DataMore frame (it has no fields): built once.
const std::vector<std::byte>& data_more_header() {
  static const std::vector<std::byte> bytes = [] {
    flatbuffers::FlatBufferBuilder builder(64);
    const auto more = schema::CreateDataMore(builder);
    const auto header = finish(builder, schema::Body::DataMore, more.Union());
    const auto* begin = reinterpret_cast<const std::byte*>(header.data());
    return std::vector<std::byte>(begin, begin + header.size());
  }();
  return bytes;
}

}  // namespace

std::size_t data_more_head_bytes() noexcept { return kPrefixBytes + data_more_header().size(); }

void OutgoingFrame::fragment(std::size_t fragment_bytes) {
  GRADMESH_CHECK(role_ == FrameRole::kData, "OutgoingFrame::fragment of a frame that is not data");
  GRADMESH_CHECK(issued == 0, "OutgoingFrame::fragment after bytes were issued");
  GRADMESH_CHECK_GT(fragment_bytes, std::size_t{0}, "OutgoingFrame::fragment of 0 bytes");
  const std::size_t total = payload_.size();
  if (total <= fragment_bytes || fragments_ > 1) return;
  const std::vector<std::byte>& header = data_more_header();
  more_head_size_ = kPrefixBytes + header.size();
  GRADMESH_CHECK_LE(more_head_size_, kMoreHeadCapacity, "DataMore head larger than its room");
  fragment_bytes_ = fragment_bytes;
  fragments_ = (total + fragment_bytes - 1) / fragment_bytes;
  const std::size_t last = total - (fragments_ - 1) * fragment_bytes;
  const auto header_size = static_cast<std::uint32_t>(header.size());
  for (auto [head, bytes] :
       {std::pair{&more_head_, fragment_bytes}, std::pair{&last_head_, last}}) {
    encode_prefix({header_size, static_cast<std::uint32_t>(bytes)},
                  std::span<std::byte, kPrefixBytes>(head->data(), kPrefixBytes));
    std::memcpy(head->data() + kPrefixBytes, header.data(), header.size());
  }
  // The first fragment: this frame's own head, its prefix now announcing one fragment's bytes.
  encode_prefix({static_cast<std::uint32_t>(head_size_ - kPrefixBytes),
                 static_cast<std::uint32_t>(fragment_bytes)},
                std::span<std::byte, kPrefixBytes>(head_data(), kPrefixBytes));
}

void OutgoingFrame::add_tags(std::size_t tag_bytes) {
  GRADMESH_CHECK(!raw_, "OutgoingFrame::add_tags of a raw frame");
  GRADMESH_CHECK(issued == 0, "OutgoingFrame::add_tags after bytes were issued");
  tag_bytes_ = tag_bytes;
}

OutgoingFrame::Fragment OutgoingFrame::fragment_at(std::size_t offset) const noexcept {
  const std::size_t total = payload_.size();
  if (fragments_ == 1) return {head(), 0, total, 0, tag_bytes_};
  // Every fragment but the last carries fragment_bytes_ payload bytes (> 0) and two tags.
  const std::size_t first = head_size_ + fragment_bytes_ + 2 * tag_bytes_;
  if (offset < first) return {head(), 0, fragment_bytes_, 0, tag_bytes_};
  const std::size_t more = more_head_size_ + fragment_bytes_ + 2 * tag_bytes_;
  const std::size_t k = std::min(fragments_ - 1, 1 + (offset - first) / more);
  const std::size_t begin = k * fragment_bytes_;
  const auto& head = k + 1 == fragments_ ? last_head_ : more_head_;
  return {std::span<const std::byte>(head.data(), more_head_size_), begin,
          std::min(total, begin + fragment_bytes_), first + (k - 1) * more, tag_bytes_};
}

std::unique_ptr<OutgoingFrame> OutgoingFrame::raw(std::span<const std::byte> raw,
                                                  std::size_t lane) {
  std::unique_ptr<OutgoingFrame> frame(new OutgoingFrame(raw.size(), lane, FrameRole::kControl));
  frame->raw_ = true;
  if (!raw.empty()) std::memcpy(frame->head_data(), raw.data(), raw.size());
  return frame;
}

std::unique_ptr<OutgoingFrame> encode_data(const Message& message) {
  auto& builder = thread_builder();
  const auto data = schema::CreateData(builder, message.lane, message.kind, message.key,
                                       message.round, message.payload.size());
  auto frame = std::make_unique<OutgoingFrame>(finish(builder, schema::Body::Data, data.Union()),
                                               message.payload, message.lane, FrameRole::kData);
  frame->priority = message.priority;
  return frame;
}

std::unique_ptr<OutgoingFrame> encode_hello(const HelloFields& hello, std::size_t control_lane) {
  auto& builder = thread_builder();
  std::vector<flatbuffers::Offset<flatbuffers::String>> peers;
  peers.reserve(hello.peers.size());
  for (const auto& peer : hello.peers) peers.push_back(builder.CreateString(peer));
  const auto peers_vector = builder.CreateVector(peers);
  const auto job_name = builder.CreateString(hello.job_name);
  const auto config_text = builder.CreateString(hello.config_text);
  const auto hello_table = schema::CreateHello(
      builder, hello.protocol_version, static_cast<std::uint32_t>(hello.rank), job_name,
      hello.config_hash, peers_vector, hello.view, hello.rejoin, config_text);
  return std::make_unique<OutgoingFrame>(finish(builder, schema::Body::Hello, hello_table.Union()),
                                         Payload(), control_lane, FrameRole::kControl);
}

std::unique_ptr<OutgoingFrame> encode_hello_ack(std::size_t rank, std::size_t control_lane) {
  auto& builder = thread_builder();
  const auto ack = schema::CreateHelloAck(builder, static_cast<std::uint32_t>(rank));
  return std::make_unique<OutgoingFrame>(finish(builder, schema::Body::HelloAck, ack.Union()),
                                         Payload(), control_lane, FrameRole::kControl);
}

std::unique_ptr<OutgoingFrame> encode_refuse(const std::string& reason, std::size_t control_lane,
                                             bool retry) {
  auto& builder = thread_builder();
  const auto refuse = schema::CreateRefuseDirect(builder, reason.c_str(), retry);
  return std::make_unique<OutgoingFrame>(finish(builder, schema::Body::Refuse, refuse.Union()),
                                         Payload(), control_lane, FrameRole::kRefuse);
}

std::unique_ptr<OutgoingFrame> encode_goodbye(std::size_t control_lane) {
  auto& builder = thread_builder();
  const auto goodbye = schema::CreateGoodbye(builder);
  return std::make_unique<OutgoingFrame>(finish(builder, schema::Body::Goodbye, goodbye.Union()),
                                         Payload(), control_lane, FrameRole::kGoodbye);
}

std::unique_ptr<OutgoingFrame> encode_abort(const std::string& reason, std::size_t control_lane,
                                            std::optional<std::size_t> failed_rank) {
  auto& builder = thread_builder();
  const auto abort = schema::CreateAbortDirect(
      builder, reason.c_str(), failed_rank ? static_cast<std::int64_t>(*failed_rank) : -1);
  return std::make_unique<OutgoingFrame>(finish(builder, schema::Body::Abort, abort.Union()),
                                         Payload(), control_lane, FrameRole::kAbort);
}

std::unique_ptr<OutgoingFrame> encode_connection_notice(std::size_t rank, const std::string& reason,
                                                        std::size_t control_lane) {
  auto& builder = thread_builder();
  const auto notice = schema::CreateConnectionNoticeDirect(
      builder, static_cast<std::uint32_t>(rank), reason.c_str());
  return std::make_unique<OutgoingFrame>(
      finish(builder, schema::Body::ConnectionNotice, notice.Union()), Payload(), control_lane,
      FrameRole::kControl);
}

std::unique_ptr<OutgoingFrame> encode_heartbeat(std::size_t control_lane) {
  auto& builder = thread_builder();
  const auto heartbeat = schema::CreateHeartbeat(builder);
  return std::make_unique<OutgoingFrame>(
      finish(builder, schema::Body::Heartbeat, heartbeat.Union()), Payload(), control_lane,
      FrameRole::kControl);
}

std::unique_ptr<OutgoingFrame> encode_liveness_query(std::size_t rank, std::size_t control_lane) {
  auto& builder = thread_builder();
  const auto query = schema::CreateLivenessQuery(builder, static_cast<std::uint32_t>(rank));
  return std::make_unique<OutgoingFrame>(
      finish(builder, schema::Body::LivenessQuery, query.Union()), Payload(), control_lane,
      FrameRole::kControl);
}

std::unique_ptr<OutgoingFrame> encode_liveness_report(std::size_t rank, std::uint32_t silent_ms,
                                                      std::size_t control_lane) {
  auto& builder = thread_builder();
  const auto report =
      schema::CreateLivenessReport(builder, static_cast<std::uint32_t>(rank), silent_ms);
  return std::make_unique<OutgoingFrame>(
      finish(builder, schema::Body::LivenessReport, report.Union()), Payload(), control_lane,
      FrameRole::kControl);
}

HeaderCheck verify_header(std::span<const std::byte> bytes, std::size_t data_lane_count) noexcept {
  HeaderCheck check;
  try {
    const auto* data = reinterpret_cast<const std::uint8_t*>(bytes.data());
    flatbuffers::Verifier verifier(data, bytes.size(), /*max_depth=*/16, /*max_tables=*/4096);
    if (bytes.size() < 8 || !schema::VerifyHeaderBuffer(verifier)) {
      check.error =
          "header of " + std::to_string(bytes.size()) + " bytes fails FlatBuffers verification";
      return check;
    }
    const schema::Header* header = schema::GetHeader(data);
    // The Verifier accepts a union whose type is set and whose table is absent; every reader of a
    // header dereferences body_as_X(), so that is refused here (found by tests/fuzz/frame_fuzz).
    if (header->body_type() != schema::Body::NONE && header->body() == nullptr) {
      check.error = std::string("header of body type ") +
                    schema::EnumNameBody(header->body_type()) + " has no body";
      return check;
    }
    switch (header->body_type()) {
      case schema::Body::Hello:
      case schema::Body::HelloAck:
      case schema::Body::Refuse:
      case schema::Body::Goodbye:
      case schema::Body::Abort:
      case schema::Body::Challenge:
      case schema::Body::Proof:
      case schema::Body::Heartbeat:
      case schema::Body::LivenessQuery:
      case schema::Body::LivenessReport:
      case schema::Body::DataMore:
      case schema::Body::ConnectionNotice:
        break;
      case schema::Body::Data:
        if (header->body_as_Data()->lane() >= data_lane_count) {
          check.error = "data lane " + std::to_string(header->body_as_Data()->lane()) +
                        " out of range: " + std::to_string(data_lane_count) + " lanes";
          return check;
        }
        break;
      default:
        check.error =
            "unknown body type " + std::to_string(static_cast<unsigned>(header->body_type()));
        return check;
    }
    check.header = header;
  } catch (...) {  // only std::bad_alloc from the strings above
    check.header = nullptr;
    check.error = "header verification failed";
  }
  return check;
}

HelloFields decode_hello(const schema::Hello& hello) {
  HelloFields fields;
  fields.protocol_version = hello.protocol_version();
  fields.rank = hello.rank();
  fields.job_name = hello.job_name() ? hello.job_name()->str() : std::string();
  fields.config_hash = hello.config_hash();
  fields.view = hello.view();
  fields.rejoin = hello.rejoin();
  fields.config_text = hello.config_text() ? hello.config_text()->str() : std::string();
  if (hello.peers()) {
    fields.peers.reserve(hello.peers()->size());
    for (const auto* peer : *hello.peers()) fields.peers.push_back(peer ? peer->str() : "");
  }
  return fields;
}

}  // namespace gradmesh::net
