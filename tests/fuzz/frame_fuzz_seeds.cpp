// Writes the seed corpus of frame_fuzz.cpp into the folder given as the only argument: one file a
// frame kind (Hello, HelloAck, Refuse, Data with a payload, Goodbye, Heartbeat, LivenessQuery,
// LivenessReport, Abort) and one holding all of them in a row, each as frame_fuzz.cpp reads an
// input (the lane count byte, then the frames).
// The frames come from net/frame.h's encoders, so the seeds follow the schema as it changes.

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "net/frame.h"
#include "net/tcp/auth.h"

namespace {

using namespace gradmesh::net;

constexpr std::byte kLaneCount{3};
/// The limits byte of frame_fuzz.cpp: after the handshake, net.max_frame_bytes = 2^(6 + 15).
constexpr std::byte kLimits{15 << 1};
/// The same limits before the handshake has completed.
constexpr std::byte kHandshakeLimits{(15 << 1) | 1};

// The frame's wire bytes, fragment by fragment (one for a frame not cut).
void append(std::vector<std::byte>& out, const OutgoingFrame& frame) {
  const auto payload = frame.payload().bytes();
  for (std::size_t at = 0; at < frame.wire_bytes();) {
    const OutgoingFrame::Fragment piece = frame.fragment_at(at);
    out.insert(out.end(), piece.head.begin(), piece.head.end());
    out.insert(out.end(), payload.begin() + static_cast<std::ptrdiff_t>(piece.payload_begin),
               payload.begin() + static_cast<std::ptrdiff_t>(piece.payload_end));
    at = piece.wire_end();
  }
}

void write(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  if (!file) throw std::runtime_error("cannot write " + path.string());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);

  const std::vector<float> values{1.0f, -2.5f, 3.25f, 0.0f};
  HelloFields hello;
  hello.rank = 1;
  hello.job_name = "fuzz-job";
  hello.config_hash = 0x0123456789abcdefull;
  hello.peers = {"127.0.0.1:7000", "127.0.0.1:7001"};
  const std::size_t control = 3;
  std::vector<std::pair<std::string, std::unique_ptr<OutgoingFrame>>> frames;
  frames.emplace_back("hello", encode_hello(hello, control));
  frames.emplace_back("hello_ack", encode_hello_ack(0, control));
  frames.emplace_back("refuse", encode_refuse("job name differs", control));
  frames.emplace_back(
      "data",
      encode_data(Message{2, 7, 42, 5, Payload::copy_of(std::as_bytes(std::span(values)))}));
  {
    auto cut = encode_data(Message{1, 3, 9, 2, Payload::copy_of(std::as_bytes(std::span(values)))});
    cut->fragment(sizeof(values[0]) * 2);  // a message in fragments: Data, then DataMore frames
    frames.emplace_back("data_cut", std::move(cut));
  }
  frames.emplace_back("goodbye", encode_goodbye(control));
  frames.emplace_back("heartbeat", encode_heartbeat(control));
  frames.emplace_back("liveness-query", encode_liveness_query(2, control));
  frames.emplace_back("liveness-report", encode_liveness_report(2, 1500, control));
  frames.emplace_back("abort", encode_abort("peer rank 2 died", control, 2));
  frames.emplace_back("connection-notice",
                      encode_connection_notice(1, "a frame's payload did not verify", control));
  // The handshake's frames: Challenges without and with a MAC, a Proof.
  auth::Nonce nonce{};
  for (std::size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<std::uint8_t>(i);
  const auth::Mac mac{};
  frames.emplace_back("challenge", auth::encode_challenge(1, nonce, false, {}, control));
  frames.emplace_back("challenge_mac", auth::encode_challenge(0, nonce, true, mac, control));
  frames.emplace_back("challenge_encrypt", auth::encode_challenge(0, nonce, true, mac, control,
                                                                  false, /*encrypt=*/true));
  frames.emplace_back("challenge_rejoin",
                      auth::encode_challenge(2, nonce, false, {}, control, /*rejoin=*/true));
  frames.emplace_back("proof", auth::encode_proof(mac, control));

  std::vector<std::byte> all{kLaneCount, kLimits};
  for (const auto& [name, frame] : frames) {
    std::vector<std::byte> one{kLaneCount, kLimits};
    append(one, *frame);
    write(dir / name, one);
    one[1] = kHandshakeLimits;
    write(dir / (name + "_handshake"), one);
    append(all, *frame);
  }
  write(dir / "all", all);
  return 0;
}
