// bench/tcp_throughput: loopback throughput of the TCP transport's send queue.
//
// Two TcpTransports on 127.0.0.1 (one process, one loop thread each); rank 1 queues `frames`
// messages of `bytes` payload bytes to rank 0 at once (one shared payload, not copied) and the
// time from the first send() to the last arrival gives MB/s of payload (1 MB = 1e6 bytes).
// Repeated `runs` times on fresh transports. `--rate R` caps the sender at R bytes/s
// (TransportOptions::max_send_rate; 0 = uncapped, the default), `--lanes S` spreads the frames
// round-robin over S lanes given equal weights (set_lane_weights: the lanes share the link),
// `--fragment F` cuts each message into fragments of F payload bytes (a peer timeout of 8 s and a
// link rate of F bytes/s given to set_link_rates: an eighth of 8 s at F; 0 = not cut, the default),
// `--security none|auth|sealed` runs without a job secret (the default), with one and
// TransportOptions::encrypt = false (authenticated at connect time only), or with one and every
// frame sealed (net/tcp/frame_cipher.h).
//
//   build/bench/bench_tcp_throughput [--frames N] [--bytes B] [--runs K] [--rate R] [--lanes S]
//                                    [--fragment F] [--security none|auth|sealed]
// A benchmark, never a test: its figures go in README.md, not in assertions.

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "net/tcp/tcp_transport.h"
#include "tests/support/process.h"

namespace {

using gradmesh::net::Message;
using gradmesh::net::Payload;
using gradmesh::net::TcpTransport;
using gradmesh::net::TransportOptions;

// One run: seconds from the first send() to the last arrival.
double run_once(std::size_t frames, std::size_t bytes, double rate, std::size_t lanes,
                std::size_t fragment, const std::string& security) {
  const auto ports = gradmesh::testing::free_ports(2);
  std::vector<std::unique_ptr<TcpTransport>> nodes;
  for (std::size_t r = 0; r < 2; ++r) {
    TransportOptions options;
    options.rank = r;
    for (const int port : ports)
      options.peers.push_back({"127.0.0.1", static_cast<std::uint16_t>(port)});
    options.job_name = "bench-tcp-throughput";
    options.max_send_rate = r == 1 ? rate : 0.0;
    if (fragment > 0) options.peer_timeout_s = 8.0;
    if (security != "none") options.secret = "bench-secret";
    options.encrypt = security == "sealed";
    for (std::size_t s = 0; s < lanes; ++s) options.lanes.push_back("s" + std::to_string(s));
    nodes.push_back(std::make_unique<TcpTransport>(std::move(options)));
  }
  std::mutex mutex;
  std::condition_variable changed;
  std::size_t received = 0;
  nodes[0]->set_handlers(
      [&](std::size_t, Message&&) {
        const std::lock_guard lock(mutex);
        if (++received == frames) changed.notify_all();
      },
      {});
  auto started = std::async(std::launch::async, [&] { nodes[0]->start(); });
  nodes[1]->start();
  started.get();
  if (lanes > 1) nodes[1]->set_lane_weights(std::vector<double>(lanes, 1.0));
  if (fragment > 0) nodes[1]->set_link_rates({static_cast<double>(fragment), 0.0});

  Payload payload = Payload::allocate(bytes);
  std::memset(payload.mutable_bytes().data(), 0x5a, bytes);
  const auto begin = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < frames; ++i)
    nodes[1]->send(0, Message{static_cast<std::uint8_t>(i % lanes), 0, i, 0, payload});
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return received == frames; });
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  auto shutdown0 = std::async(std::launch::async, [&] { nodes[0]->shutdown(5.0); });
  nodes[1]->shutdown(5.0);
  shutdown0.get();
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t frames = 200;
  std::size_t bytes = 4'000'000;
  std::size_t runs = 3;
  double rate = 0.0;
  std::size_t lanes = 1;
  std::size_t fragment = 0;
  std::string security = "none";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--frames") {
      frames = std::strtoull(value, nullptr, 10);
    } else if (flag == "--bytes") {
      bytes = std::strtoull(value, nullptr, 10);
    } else if (flag == "--runs") {
      runs = std::strtoull(value, nullptr, 10);
    } else if (flag == "--rate") {
      rate = std::strtod(value, nullptr);
    } else if (flag == "--lanes") {
      lanes = std::strtoull(value, nullptr, 10);
    } else if (flag == "--fragment") {
      fragment = std::strtoull(value, nullptr, 10);
    } else if (flag == "--security" &&
               (std::string(value) == "none" || std::string(value) == "auth" ||
                std::string(value) == "sealed")) {
      security = value;
    } else {
      std::fprintf(stderr,
                   "usage: bench_tcp_throughput [--frames N] [--bytes B] [--runs K] [--rate R] "
                   "[--lanes S] [--fragment F] [--security none|auth|sealed]\n");
      return 2;
    }
  }
  if (frames == 0 || runs == 0 || lanes == 0 || lanes > 255) {
    std::fprintf(stderr, "bench_tcp_throughput: frames, runs >= 1 and 1 <= lanes <= 255\n");
    return 2;
  }
  std::printf(
      "%zu frames x %zu bytes, rate %s, %zu lane(s), %s, security %s\n", frames, bytes,
      rate > 0 ? (std::to_string(rate / 1e6) + " MB/s").c_str() : "uncapped", lanes,
      fragment > 0 ? ("fragments of " + std::to_string(fragment) + " bytes").c_str() : "not cut",
      security.c_str());
  std::printf("%4s %10s %10s\n", "run", "seconds", "MB/s");
  for (std::size_t r = 0; r < runs; ++r) {
    const double seconds = run_once(frames, bytes, rate, lanes, fragment, security);
    std::printf("%4zu %10.3f %10.1f\n", r + 1, seconds,
                static_cast<double>(frames * bytes) / seconds / 1e6);
  }
  return 0;
}
