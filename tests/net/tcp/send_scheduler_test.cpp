// Tests for net/tcp/send_scheduler.h: the order in which the SendScheduler writes the frames of a
// Connection, and its pacing under the send cap. One libuv loop in this thread, one Connection
// dialing another on 127.0.0.1 (no TcpTransport, no handshake: frames go as queued); the reader
// records the frames in the order they arrive. tests/net/tcp/send_schedule_test.cpp covers the
// same rules through whole transports (many connections, Goodbye, backpressure).

#include "net/tcp/send_scheduler.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <uv.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "net/frame.h"
#include "net/tcp/connection.h"

using namespace gradmesh::net;
using gradmesh::net::detail::Connection;
using gradmesh::net::tcp::SendScheduler;

namespace {

constexpr std::size_t kLanes = 2;                     // data lanes; "control" is lane kLanes
constexpr auto kDeadline = std::chrono::seconds(10);  // every wait below is bounded by this

struct Arrival {
  schema::Body type = schema::Body::NONE;
  std::size_t lane = 0;
  std::uint64_t key = 0;
};

// Records what a Connection reports: its connect, the frames read, a broken stream.
struct Recorder final : detail::ConnectionListener {
  int connect_status = 1;  // 1: not yet
  std::vector<Arrival> arrivals;
  std::string broken;

  void on_connected(Connection& /*connection*/, int status) noexcept override {
    connect_status = status;
  }
  void on_frame(Connection& /*connection*/, const schema::Header& header, Payload&& /*payload*/,
                std::size_t /*wire_bytes*/) noexcept override {
    Arrival arrival{header.body_type()};
    if (const schema::Data* data = header.body_as_Data()) {
      arrival.lane = data->lane();
      arrival.key = data->key();
    }
    arrivals.push_back(arrival);
  }
  void on_malformed(Connection& /*connection*/, const std::string& why,
                    std::size_t /*wire_bytes*/) noexcept override {
    broken = "malformed: " + why;
  }
  void on_unverified(Connection& /*connection*/, const std::string& why) noexcept override {
    broken = "unverified: " + why;
  }
  void on_broken(Connection& /*connection*/, int /*status*/,
                 const std::string& why) noexcept override {
    broken = why;
  }
  void on_written(Connection& /*connection*/, const OutgoingFrame& /*frame*/, std::size_t /*bytes*/,
                  bool /*frame_done*/) noexcept override {}
  void on_writable(Connection& /*connection*/) noexcept override {
    if (scheduler != nullptr) scheduler->pump();  // as the transport does
  }
  void on_bytes_read(Connection& /*connection*/, std::size_t /*bytes*/) noexcept override {}

  SendScheduler* scheduler = nullptr;
};

detail::ReadLimits data_limits() {
  detail::ReadLimits limits;
  limits.data_lane_count = kLanes;
  limits.handshake = false;
  return limits;
}

// A loop with a sending Connection dialed to a reading one on 127.0.0.1, and a SendScheduler
// (capped at `max_send_rate` bytes/s, or not with 0) for the sender.
class Link {
 public:
  explicit Link(double max_send_rate) : scheduler_(kLanes + 1) {
    REQUIRE(uv_loop_init(&loop_) == 0);
    uv_timer_init(&loop_, &tick_);  // wakes run_until() to check its condition
    uv_timer_start(
        &tick_, [](uv_timer_t*) {}, 5, 5);
    uv_tcp_init(&loop_, &server_);
    server_.data = this;
    sockaddr_in address{};
    REQUIRE(uv_ip4_addr("127.0.0.1", 0, &address) == 0);
    REQUIRE(uv_tcp_bind(&server_, reinterpret_cast<const sockaddr*>(&address), 0) == 0);
    REQUIRE(uv_listen(reinterpret_cast<uv_stream_t*>(&server_), 4, &Link::on_accept) == 0);
    int length = sizeof(address);
    REQUIRE(uv_tcp_getsockname(&server_, reinterpret_cast<sockaddr*>(&address), &length) == 0);

    scheduler_.open(&loop_, max_send_rate);
    sender_events_.scheduler = &scheduler_;
    sender_ = Connection::make(&loop_, sender_events_, Connection::Role::kDialer, 0, data_limits());
    REQUIRE(sender_->connect(reinterpret_cast<const sockaddr*>(&address)) == 0);
    REQUIRE(run_until([&] { return sender_events_.connect_status != 1 && receiver_ != nullptr; }));
    REQUIRE(sender_events_.connect_status == 0);
  }

  ~Link() {
    scheduler_.close();
    if (sender_ != nullptr) sender_->close();
    if (receiver_ != nullptr) receiver_->close();
    uv_close(reinterpret_cast<uv_handle_t*>(&server_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&tick_), nullptr);
    uv_run(&loop_, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(&loop_) == 0);
  }

  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  // Runs the loop until `done()` or kDeadline; returns done().
  bool run_until(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (!done() && std::chrono::steady_clock::now() < deadline) uv_run(&loop_, UV_RUN_ONCE);
    return done();
  }
  bool wait_for_arrivals(std::size_t n) {
    return run_until([&] { return received().size() >= n || !receiver_events_.broken.empty(); });
  }

  SendScheduler& scheduler() { return scheduler_; }
  Connection& sender() { return *sender_; }
  const std::vector<Arrival>& received() const { return receiver_events_.arrivals; }
  const std::string& broken() const { return receiver_events_.broken; }

 private:
  static void on_accept(uv_stream_t* server, int status) {
    auto* self = static_cast<Link*>(server->data);
    if (status != 0 || self->receiver_ != nullptr) return;
    self->receiver_ = Connection::make(&self->loop_, self->receiver_events_,
                                       Connection::Role::kAcceptor, 1, data_limits());
    if (uv_accept(server, self->receiver_->stream()) != 0 ||
        self->receiver_->start_reading() != 0) {
      self->receiver_events_.broken = "accept failed";
    }
  }

  uv_loop_t loop_{};
  uv_timer_t tick_{};
  uv_tcp_t server_{};
  SendScheduler scheduler_;
  Recorder sender_events_;
  Recorder receiver_events_;
  Connection* sender_ = nullptr;
  Connection* receiver_ = nullptr;
};

std::unique_ptr<OutgoingFrame> data(std::uint8_t lane, std::uint32_t priority, std::uint64_t key,
                                    std::size_t bytes = 1000) {
  Message message;
  message.lane = lane;
  message.key = key;
  message.priority = priority;
  message.payload = Payload::allocate(bytes);
  return encode_data(message);
}

}  // namespace

TEST_CASE("send scheduler writes control frames first, then data by priority", "[net][schedule]") {
  Link link(0.0);
  link.scheduler().enqueue(link.sender(), data(0, 5, 1));
  link.scheduler().enqueue(link.sender(), data(0, 0, 2));
  link.scheduler().enqueue(link.sender(), encode_heartbeat(kLanes));
  link.scheduler().enqueue(link.sender(), data(0, 5, 3));
  CHECK_FALSE(link.scheduler().idle());
  link.scheduler().pump();
  REQUIRE(link.wait_for_arrivals(4));
  INFO(link.broken());
  REQUIRE(link.received().size() == 4);
  CHECK(link.received()[0].type == schema::Body::Heartbeat);
  CHECK(link.received()[1].key == 2);  // priority 0
  CHECK(link.received()[2].key == 1);  // priority 5, in queue order
  CHECK(link.received()[3].key == 3);
  link.scheduler().pump();  // nothing left: the connection leaves the ready list
  CHECK(link.scheduler().idle());
}

TEST_CASE("send scheduler shares the link by lane weights once they are set", "[net][schedule]") {
  Link link(0.0);
  link.scheduler().set_weights(std::vector<double>{3.0, 1.0});
  constexpr std::size_t kPerLane = 12;
  for (std::uint64_t i = 0; i < kPerLane; ++i) {
    // Lane 1's frames have the better priority: without lane shares they would all go first.
    link.scheduler().enqueue(link.sender(), data(0, 9, i));
    link.scheduler().enqueue(link.sender(), data(1, 0, 100 + i));
  }
  link.scheduler().pump();
  REQUIRE(link.wait_for_arrivals(2 * kPerLane));
  INFO(link.broken());
  REQUIRE(link.received().size() == 2 * kPerLane);
  // Equal frames, weights 3:1: while both lanes are backlogged lane 0 gets 3 frames of every 4.
  std::size_t lane0 = 0;
  for (std::size_t i = 0; i < 12; ++i) lane0 += link.received()[i].lane == 0 ? 1 : 0;
  CHECK(lane0 >= 8);
  CHECK(lane0 <= 10);
  // Within a lane, queue order.
  std::uint64_t next0 = 0, next1 = 100;
  for (const Arrival& arrival : link.received())
    CHECK(arrival.key == (arrival.lane == 0 ? next0++ : next1++));
}

TEST_CASE("send scheduler without weights keeps one priority order over all lanes",
          "[net][schedule]") {
  Link link(0.0);
  link.scheduler().enqueue(link.sender(), data(0, 9, 1));
  link.scheduler().enqueue(link.sender(), data(1, 0, 2));
  link.scheduler().enqueue(link.sender(), data(0, 4, 3));
  link.scheduler().pump();
  REQUIRE(link.wait_for_arrivals(3));
  REQUIRE(link.received().size() == 3);
  CHECK(link.received()[0].key == 2);
  CHECK(link.received()[1].key == 3);
  CHECK(link.received()[2].key == 1);
}

TEST_CASE("send scheduler forgets a connection and takes it back when a frame is queued",
          "[net][schedule]") {
  Link link(0.0);
  link.scheduler().enqueue(link.sender(), data(0, 0, 1));
  link.scheduler().forget(link.sender());
  CHECK(link.scheduler().idle());
  link.scheduler().pump();  // the forgotten connection is not written
  CHECK(link.sender().has_unissued());
  link.scheduler().enqueue(link.sender(), data(0, 0, 2));
  link.scheduler().pump();
  REQUIRE(link.wait_for_arrivals(2));
  REQUIRE(link.received().size() == 2);
  CHECK(link.received()[0].key == 1);
  CHECK(link.received()[1].key == 2);
}

TEST_CASE("send scheduler under a send cap paces the frames with its timer", "[net][schedule]") {
  constexpr double kRate = 2.0e6;  // bytes/s: bucket 64 KiB, backlog 200 KB
  constexpr std::size_t kFrames = 6;
  constexpr std::size_t kFrameBytes = 100 * 1000;
  Link link(kRate);
  const auto start = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < kFrames; ++i)
    link.scheduler().enqueue(link.sender(), data(0, 0, i, kFrameBytes));
  link.scheduler().pump();         // writes what the bucket holds; the pace timer does the rest
  CHECK(link.received().empty());  // nothing is read before the loop runs
  REQUIRE(link.wait_for_arrivals(kFrames));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(link.received().size() == kFrames);
  // 600 KB at 2 MB/s, less what a full bucket and a banked backlog may send at once (264 KB).
  CHECK(seconds >= 0.15);
  CHECK(seconds < 5.0);
  CHECK(link.scheduler().idle());
}
