#pragma once
// Helpers of the TCP transport tests: many transports in one process as threads on 127.0.0.1.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/error.h"
#include "net/frame.h"
#include "net/tcp/tcp_transport.h"
#include "tests/support/threads.h"

namespace gradmesh::net::testing {

using namespace std::chrono_literals;
using gradmesh::PeerError;

// n distinct free TCP ports on 127.0.0.1 (bound to port 0 together, then released).
inline std::vector<std::uint16_t> free_ports(std::size_t n) {
  std::vector<int> fds;
  std::vector<std::uint16_t> ports;
  for (std::size_t i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    socklen_t length = sizeof(address);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    ports.push_back(ntohs(address.sin_port));
    fds.push_back(fd);
  }
  for (const int fd : fds) ::close(fd);
  return ports;
}

inline TransportOptions options_for(std::size_t rank, const std::vector<std::uint16_t>& ports) {
  TransportOptions options;
  options.rank = rank;
  for (const auto port : ports) options.peers.push_back({"127.0.0.1", port});
  options.job_name = "net-test";
  options.config_hash = 0x5eed;
  options.connect_timeout_s = 5.0;
  options.lanes = {"push", "pull"};
  return options;
}

// A TcpTransport plus what its handlers saw.
struct Node {
  explicit Node(TransportOptions options) : transport(std::move(options)) {
    transport.set_handlers(
        [this](std::size_t from, Message&& message) {
          const std::lock_guard lock(mutex);
          received.emplace_back(from, std::move(message));
          arrivals.push_back(std::chrono::steady_clock::now());
          changed.notify_all();
        },
        [this](const PeerError& error) {
          const std::lock_guard lock(mutex);
          failures.push_back(error);
          changed.notify_all();
        });
    transport.set_rejoin_handler([this](std::size_t rank) {
      const std::lock_guard lock(mutex);
      rejoined.push_back(rank);
      changed.notify_all();
    });
  }
  // Waits up to `timeout` for `predicate` over this node's state (under its mutex).
  template <class Predicate>
  bool wait(Predicate predicate, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, timeout, [&] { return predicate(*this); });
  }

  // Declared before `transport`, so they outlive its loop thread (members die in reverse order).
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::pair<std::size_t, Message>> received;
  std::vector<std::chrono::steady_clock::time_point> arrivals;
  std::vector<PeerError> failures;
  std::vector<std::size_t> rejoined;  // ranks that restarted and took their rank back
  TcpTransport transport;
};

using Nodes = std::vector<std::unique_ptr<Node>>;

inline Nodes make_nodes(std::size_t n, const std::function<void(TransportOptions&)>& edit = {},
                        std::vector<std::uint16_t>* ports_out = nullptr) {
  const auto ports = free_ports(n);
  if (ports_out != nullptr) *ports_out = ports;
  Nodes nodes;
  for (std::size_t r = 0; r < n; ++r) {
    auto options = options_for(r, ports);
    if (edit) edit(options);
    nodes.push_back(std::make_unique<Node>(std::move(options)));
  }
  return nodes;
}

// start() on every node concurrently; returns each node's exception (or nullptr).
inline std::vector<std::exception_ptr> start_all(Nodes& nodes) {
  std::vector<std::future<void>> started;
  for (auto& node : nodes)
    started.push_back(std::async(std::launch::async, [&node] { node->transport.start(); }));
  std::vector<std::exception_ptr> errors;
  for (auto& f : started) {
    try {
      f.get();
      errors.push_back(nullptr);
    } catch (...) {
      errors.push_back(std::current_exception());
    }
  }
  return errors;
}

// shutdown(5 s) on every node concurrently (each waits for the others' goodbyes).
inline void shutdown_all(Nodes& nodes) {
  std::vector<std::future<void>> done;
  for (auto& n : nodes)
    done.push_back(std::async(std::launch::async, [&n] { n->transport.shutdown(5.0); }));
  for (auto& f : done) f.get();
}

inline void start_all_ok(Nodes& nodes) {
  for (const auto& error : start_all(nodes)) REQUIRE(error == nullptr);
}

using gradmesh::testing::message_of;

inline Payload pattern(std::size_t bytes, unsigned seed) {
  Payload payload = Payload::allocate(bytes);
  auto out = payload.mutable_bytes();
  for (std::size_t i = 0; i < bytes; ++i) out[i] = std::byte((i * 131 + seed) & 0xff);
  return payload;
}

inline bool has_pattern(const Payload& payload, std::size_t bytes, unsigned seed) {
  if (payload.size() != bytes) return false;
  const auto in = payload.bytes();
  for (std::size_t i = 0; i < bytes; ++i)
    if (in[i] != std::byte((i * 131 + seed) & 0xff)) return false;
  return true;
}

inline std::vector<std::byte> to_bytes(const FramePrefix& prefix, std::span<const std::byte> rest) {
  std::vector<std::byte> bytes(kPrefixBytes);
  encode_prefix(prefix, std::span<std::byte, kPrefixBytes>(bytes.data(), kPrefixBytes));
  bytes.insert(bytes.end(), rest.begin(), rest.end());
  return bytes;
}

// A raw client socket to 127.0.0.1:port.
inline int dial_raw(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  timeval timeout{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

}  // namespace gradmesh::net::testing
