// Tests for sync/probe/link_probe.h: ranks as threads on the in-process transport (and, in the
// hidden [tcp] cases, on loopback TCP).

#include "sync/probe/link_probe.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "net/inproc/inproc_transport.h"
#include "net/tcp/tcp_transport.h"
#include "sync/probe/link_probe_internal.h"
#include "sync/probe/messages.h"
#include "tests/support/process.h"
#include "tests/support/threads.h"

using namespace gradmesh;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One rank: its router and probe (made before the transport starts).
struct Rank {
  Rank(net::Transport* transport, std::size_t rank, std::size_t nodes, sync::LinkProbeOptions o)
      : router(transport, rank, nodes), probe(router, o) {}
  sync::LaneRouter router;
  sync::LinkProbe probe;
};

// A mesh of n ranks with probes; transports started.
struct Cluster {
  Cluster(std::size_t n, sync::LinkProbeOptions options = {})
      : mesh(net::make_inproc_mesh(n, sync::lane_names())) {
    for (std::size_t r = 0; r < n; ++r) {
      ranks.push_back(std::make_unique<Rank>(mesh[r].get(), r, n, options));
    }
    for (auto& t : mesh) t->start();
  }
  ~Cluster() {
    std::vector<std::thread> leaving;  // clean goodbyes, all at once (each waits for the others)
    for (auto& t : mesh) leaving.emplace_back([&t] { t->shutdown(5.0); });
    for (auto& t : leaving) t.join();
  }
  // Runs body(rank) on one thread per rank in `ranks_to_run` (all if empty); rethrows nothing,
  // returns each rank's exception (or nullptr).
  std::vector<std::exception_ptr> run(const std::function<void(std::size_t)>& body,
                                      std::vector<std::size_t> ranks_to_run = {}) {
    return gradmesh::testing::run_on_threads(ranks.size(), body, std::move(ranks_to_run));
  }
  std::vector<std::unique_ptr<net::InProcTransport>> mesh;
  std::vector<std::unique_ptr<Rank>> ranks;
};

void rethrow_any(const std::vector<std::exception_ptr>& errors) {
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// The PeerError `error` holds (FAIL if it holds something else or nothing).
PeerError peer_error(const std::exception_ptr& error) {
  REQUIRE(error);
  try {
    std::rethrow_exception(error);
  } catch (const PeerError& e) {
    return e;
  } catch (const std::exception& e) {
    FAIL("expected a PeerError, got: " << e.what());
  }
  throw std::logic_error("unreachable");
}

// What a rank would fill in from tasks/profile.h: rank-dependent, so combine() has work to do.
void fill_compute(sync::NodeProfile& p, std::size_t rank) {
  p.forward_seconds = {0.001 * static_cast<double>(rank + 1), 0.002};
  p.backward_seconds = {0.003, 0.0005 * static_cast<double>(rank + 1)};
  p.backward_input_seconds = {0.001, 0.0002 * static_cast<double>(rank + 1)};
  p.gemm_flops = 1e9 * static_cast<double>(rank + 2);
  p.cipher_seconds_per_byte = 1e-9 * static_cast<double>(rank + 1);
  // The compressor's figures (compress::profile_codec) on the odd ranks only: a profile without
  // them travels and combines beside ones with them.
  if (rank % 2 == 1) {
    p.encode_seconds = {0.0, 1e-4 * static_cast<double>(rank)};
    p.decode_seconds = {0.0, 2e-5 * static_cast<double>(rank)};
    p.half_encode_seconds_per_float = 1e-9 * static_cast<double>(rank);
    p.half_decode_seconds_per_float = 3e-10;
  }
}

// measure_links, exchange, combine and barriers on n in-process ranks; returns the slowest
// measure_links time.
double measure_exchange_combine(std::size_t n) {
  Cluster cluster(n);
  std::vector<sync::NodeProfile> rows(n);
  std::vector<std::vector<sync::NodeProfile>> all(n);
  std::vector<double> took(n);
  std::vector<double> transport(n, -1.0);
  rethrow_any(cluster.run([&](std::size_t r) {
    sync::LinkProbe& probe = cluster.ranks[r]->probe;
    probe.barrier(1);  // every rank is up before the clock starts
    const auto start = Clock::now();
    rows[r] = probe.measure_links();
    took[r] = since(start);
    transport[r] = probe.transport_cpu_seconds_per_byte();
    fill_compute(rows[r], r);
    all[r] = probe.exchange(rows[r]);
    probe.barrier(2);
    probe.barrier(3);
    CHECK_THROWS_AS(probe.barrier(3), ContractError);  // tags increase from call to call
  }));
  for (std::size_t r = 0; r < n; ++r) {
    INFO("n " << n << ", rank " << r);
    REQUIRE(rows[r].alpha.size() == n);
    REQUIRE(rows[r].bandwidth.size() == n);
    for (std::size_t peer = 0; peer < n; ++peer) {
      INFO("peer " << peer << ": alpha " << rows[r].alpha[peer] << " s, B "
                   << rows[r].bandwidth[peer] << " bytes/s");
      if (peer == r) {
        CHECK(rows[r].alpha[peer] == 0);
        CHECK(rows[r].bandwidth[peer] == 0);
      } else {
        CHECK(std::isfinite(rows[r].alpha[peer]));
        CHECK(rows[r].alpha[peer] > 0);
        CHECK(std::isfinite(rows[r].bandwidth[peer]));
        CHECK(rows[r].bandwidth[peer] > 0);
      }
    }
    CHECK(std::isfinite(rows[r].message_seconds));
    CHECK(rows[r].message_seconds >= 0);
    CHECK(rows[r].message_seconds < 0.01);  // 64 tiny messages in memory: far below 10 ms each
    CHECK(all[r] == all[0]);                // identical on every rank
    REQUIRE(all[r].size() == n);
    CHECK(all[r][r] == rows[r]);
    CHECK(cluster.ranks[r]->router.rejected() == 0);
    // The process's CPU time over the bulk bytes: measured (the threads share one process's
    // clock; in memory a byte costs next to nothing, so no bound beyond finite)
    CHECK(std::isfinite(transport[r]));
    CHECK(transport[r] >= 0);
  }
  const sync::JobMeasurements job = sync::combine(all[0]);
  CHECK(job.links.nodes == n);
  CHECK(job.cipher_seconds_per_byte == 1e-9 * static_cast<double>(n));  // through the exchange
  CHECK_NOTHROW(topo::slowest_link(job.links));
  CHECK(job.links.alpha[0 * n + 1] == rows[0].alpha[1]);
  CHECK(job.links.bandwidth[(n - 1) * n + 0] == rows[n - 1].bandwidth[0]);
  CHECK(job.forward_seconds == std::vector<double>{0.001 * static_cast<double>(n), 0.002});
  CHECK(job.backward_seconds == std::vector<double>{0.003, 0.0005 * static_cast<double>(n)});
  CHECK(job.backward_input_seconds == std::vector<double>{0.001, 0.0002 * static_cast<double>(n)});
  CHECK(job.gemm_flops == 2e9);
  // The slowest odd rank's codec figures (every n here has rank 1).
  const double odd = static_cast<double>(n % 2 == 0 ? n - 1 : n - 2);
  CHECK(job.encode_seconds == std::vector<double>{0.0, 1e-4 * odd});
  CHECK(job.decode_seconds == std::vector<double>{0.0, 2e-5 * odd});
  CHECK(job.half_encode_seconds_per_float == 1e-9 * odd);
  CHECK(job.half_decode_seconds_per_float == 3e-10);
  REQUIRE(job.links.message_seconds.size() == n);
  CHECK(job.links.message_seconds[n - 1] == rows[n - 1].message_seconds);
  return *std::max_element(took.begin(), took.end());
}

}  // namespace

TEST_CASE("the probe's lane is a lane of every job, id 0", "[sync][probe]") {
  CHECK(sync::lane_names().front() == sync::probe::kLane);
  CHECK(sync::lane_id(sync::probe::kLane) == 0);
}

TEST_CASE("link probe: alpha and B to every peer, identical profiles, barriers, on 2-4 ranks",
          "[sync][probe][inproc]") {
  for (std::size_t n = 2; n <= 4; ++n) {
    const double seconds = measure_exchange_combine(n);
    INFO("n " << n << ": measure_links took " << seconds << " s");
    CHECK(seconds < 2.0);
  }
}

TEST_CASE("link probe on one node: zeros, its own profile, no waiting", "[sync][probe]") {
  sync::LaneRouter alone(nullptr, 0, 1);
  sync::LinkProbe probe(alone, {});
  const sync::NodeProfile row = probe.measure_links();
  CHECK(row.alpha == std::vector<double>{0});
  CHECK(row.bandwidth == std::vector<double>{0});
  CHECK(probe.transport_cpu_seconds_per_byte() == 0);  // no bytes to move
  sync::NodeProfile local = row;
  fill_compute(local, 0);
  CHECK(probe.exchange(local) == std::vector<sync::NodeProfile>{local});
  probe.barrier(3);
  const sync::JobMeasurements job = sync::combine({local});
  CHECK(job.links.nodes == 1);
  CHECK(job.gemm_flops == local.gemm_flops);
  CHECK_THROWS_AS(probe.exchange(sync::NodeProfile{}), ContractError);  // alpha not of size 1
}

TEST_CASE("link probe options are checked", "[sync][probe]") {
  sync::LaneRouter alone(nullptr, 0, 1);
  const auto refused = [&](const std::function<void(sync::LinkProbeOptions&)>& change) {
    sync::LinkProbeOptions bad;
    change(bad);
    CHECK_THROWS_AS(sync::LinkProbe(alone, bad), ContractError);
  };
  refused([](auto& o) { o.max_send_rate = 0; });
  refused([](auto& o) { o.pings = 0; });
  refused([](auto& o) { o.timeout_s = -1; });
  refused([](auto& o) { o.budget_s = 0; });
  refused([](auto& o) { o.target_seconds = std::nan(""); });
  refused([](auto& o) { o.min_bulk_bytes = 0; });
  refused([](auto& o) { o.max_bulk_bytes = o.min_bulk_bytes - 1; });
  CHECK_NOTHROW(sync::LinkProbe(alone, sync::LinkProbeOptions{}));
}

TEST_CASE("link probe on a slow link: within its budget, B within 20% of the rate",
          "[sync][probe][inproc]") {
  // One direction of one pair at 10 Mbit/s, one at 1 Mbit/s (where a fixed 4 MiB transfer took
  // 34 s); the others instant. Store-and-forward of whole messages: B reads the rate itself.
  struct Case {
    std::size_t from, to;
    double rate;
  };
  for (const Case slow : {Case{0, 1, 1.25e6}, Case{2, 0, 1.25e5}}) {
    INFO("rank " << slow.from << " -> " << slow.to << " at " << slow.rate << " bytes/s");
    sync::LinkProbeOptions options;
    Cluster cluster(3, options);
    cluster.mesh[slow.from]->set_link_rate(slow.to, slow.rate);
    std::vector<sync::NodeProfile> rows(3);
    std::vector<double> took(3);
    rethrow_any(cluster.run([&](std::size_t r) {
      cluster.ranks[r]->probe.barrier(1);
      rows[r] = cluster.ranks[r]->probe.measure_links();
      took[r] = cluster.ranks[r]->probe.took_seconds();
    }));
    const sync::LinkReport& link = cluster.ranks[slow.from]->probe.report()[slow.to];
    INFO("B " << link.bandwidth << " bytes/s from " << link.bytes << " bytes in " << link.seconds
              << " s, " << link.transfers << " transfers; took " << took[slow.from] << " s");
    CHECK(rows[slow.from].bandwidth[slow.to] == link.bandwidth);
    CHECK(link.kind == sync::LinkMeasure::kMeasured);
    CHECK(link.seconds >= options.target_seconds);
    CHECK(std::abs(link.bandwidth / slow.rate - 1) < 0.2);
    CHECK(link.transfers >= 2);  // it grew from min_bulk_bytes
    for (std::size_t r = 0; r < 3; ++r) {
      INFO("rank " << r);
      // The budget, plus the last transfer's overshoot and the bursts: far below a fixed 4 MiB.
      CHECK(took[r] < options.budget_s + 1.0);
      for (std::size_t p = 0; p < 3; ++p) {
        if (p == r || (r == slow.from && p == slow.to)) continue;
        // Instant links: measured at the bound, far faster than the slow one.
        CHECK(rows[r].bandwidth[p] > 10 * slow.rate);
      }
      CHECK(cluster.ranks[r]->router.rejected() == 0);
    }
  }
}

TEST_CASE("link probe: an ack held up on its way back does not make B read slow",
          "[sync][probe][inproc]") {
  // On a shaped link the receiver's ack waits in its egress queue behind its own bulk transfer of
  // the same step (tbf's queue: 0.3 s at 1 Mbit/s). Timed at the sender, a transfer then lasts
  // that much longer and B read a fraction of the rate; the receiver times it from its first
  // message to its last, which the ack's trip does not touch.
  sync::LinkProbeOptions options;
  // Every ack, pong and gate takes the 0.3 s here (on a real link only those queued behind bulk
  // bytes do): a budget that leaves the transfers their time, and a bound that ends them sooner.
  options.pings = 1;
  options.budget_s = 6.0;
  options.max_bulk_bytes = 512 << 10;  // 0.42 s at the rate
  Cluster cluster(2, options);
  const double rate = 1.25e6;  // 10 Mbit/s
  cluster.mesh[0]->set_link_rate(1, rate);
  cluster.mesh[1]->set_link_latency(0, 0.3);  // every message 1 -> 0: the acks, the pongs
  rethrow_any(cluster.run([&](std::size_t r) { (void)cluster.ranks[r]->probe.measure_links(); }));
  const sync::LinkReport& link = cluster.ranks[0]->probe.report()[1];
  INFO("B " << link.bandwidth << " bytes/s from " << link.bytes << " bytes in " << link.seconds
            << " s, " << link.transfers << " transfers, alpha " << link.alpha);
  CHECK(link.alpha > 0.1);  // the pongs came late: alpha is half the round trip
  CHECK(link.kind == sync::LinkMeasure::kMeasured);
  CHECK(std::abs(link.bandwidth / rate - 1) < 0.2);
}

TEST_CASE("link probe on a link too slow for its budget: an estimate, not a failure",
          "[sync][probe][inproc]") {
  sync::LinkProbeOptions options;
  options.budget_s = 0.2;
  options.target_seconds = 0.3;  // the first 4 KiB take 41 ms at 100 kB/s; the next would not fit
  // 3 ranks: 0 -> 1's acks travel 1 -> 0 in a round where 1 sends its transfer elsewhere (with
  // 2 ranks they would queue behind it on the slow link, as on one TCP connection).
  Cluster cluster(3, options);
  cluster.mesh[1]->set_link_rate(0, 1e5);
  const auto start = Clock::now();
  rethrow_any(cluster.run([&](std::size_t r) { (void)cluster.ranks[r]->probe.measure_links(); }));
  CHECK(since(start) < options.timeout_s);
  const sync::LinkReport& link = cluster.ranks[1]->probe.report()[0];
  INFO("B " << link.bandwidth << " from " << link.bytes << " bytes in " << link.seconds << " s");
  CHECK(link.kind == sync::LinkMeasure::kEstimate);
  CHECK(link.seconds < options.target_seconds);
  CHECK(link.bandwidth > 0);
  CHECK(link.bandwidth < 1.2e5);  // an estimate reads low, never high
  // The other direction is instant: at the bound (or measured), never an estimate.
  CHECK(cluster.ranks[0]->probe.report()[1].kind != sync::LinkMeasure::kEstimate);
}

TEST_CASE("link probe rejects malformed messages and still measures", "[sync][probe][inproc]") {
  Cluster cluster(2);
  sync::LaneRouter& sender = cluster.ranks[1]->router;
  const sync::LaneId lane = sync::lane_id(sync::probe::kLane);
  using K = sync::probe::Kind;
  const auto kind = [](K k) { return static_cast<std::uint16_t>(k); };
  const auto bytes = [](std::size_t n) { return net::Payload::copy_of(std::vector<std::byte>(n)); };
  const std::vector<net::Message> bad = {
      {lane, 99, 0, 0, {}},                               // unknown kind
      {lane, kind(K::kPing), 1, 0, bytes(8)},             // a ping has no payload
      {lane, kind(K::kPong), 12345, 0, {}},               // a pong no one waits for
      {lane, kind(K::kBulkAck), 4096, 1, {}},             // an ack of no transfer
      {lane, kind(K::kBulk), 4096, 0, bytes(4096)},       // round 0
      {lane, kind(K::kBulk), 4096, 1, bytes(8192)},       // overruns its transfer
      {lane, kind(K::kBulk), 4096, 1, bytes(300 << 10)},  // above 256 KiB
      {lane, kind(K::kProfile), 0, 0, bytes(3)},          // shorter than its header
      {lane, kind(K::kProfile), 0, 0, bytes(40)},         // 0 nodes
      {lane, kind(K::kBarrier), 1, 0, bytes(1)},          // a barrier has no payload
  };
  for (const auto& m : bad) REQUIRE_FALSE(sender.send(0, m).has_value());
  const auto start = Clock::now();
  while (cluster.ranks[0]->router.rejected() < bad.size() && since(start) < 5) {
    std::this_thread::sleep_for(5ms);
  }
  CHECK(cluster.ranks[0]->router.rejected() == bad.size());
  CHECK(cluster.mesh[0]->counters().malformed_frames == 0);  // rejected, never thrown
  std::vector<sync::NodeProfile> rows(2);
  rethrow_any(
      cluster.run([&](std::size_t r) { rows[r] = cluster.ranks[r]->probe.measure_links(); }));
  CHECK(rows[0].bandwidth[1] > 0);
  CHECK(rows[1].bandwidth[0] > 0);
}

TEST_CASE("a rank that closes its transport during the probe fails the others, naming it",
          "[sync][probe][inproc]") {
  sync::LinkProbeOptions options;
  options.timeout_s = 5;
  Cluster cluster(4, options);
  const auto start = Clock::now();
  auto errors = cluster.run([&](std::size_t r) {
    if (r == 3) {
      std::this_thread::sleep_for(20ms);  // the others are measuring by now
      cluster.mesh[3]->close();
      return;
    }
    (void)cluster.ranks[r]->probe.measure_links();
  });
  CHECK(since(start) < options.timeout_s);  // the failure, not the timeout, ended it
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(peer_error(errors[r]).rank() == 3);
  }
  // Later calls fail at once with the same error.
  CHECK_THROWS_AS(cluster.ranks[0]->probe.barrier(9), PeerError);
}

TEST_CASE("a silent rank makes measure_links, exchange and barrier time out, naming it",
          "[sync][probe][inproc]") {
  sync::LinkProbeOptions options;
  options.timeout_s = 0.5;
  Cluster cluster(3, options);
  const std::vector<std::size_t> talking = {0, 1};  // rank 2 is up (its handlers answer) but silent
  const auto check_names_2 = [](const std::vector<std::exception_ptr>& errors) {
    for (std::size_t r = 0; r < 2; ++r) {
      INFO("rank " << r);
      const PeerError e = peer_error(errors[r]);
      CHECK(e.rank() == 2);
      CHECK(e.address() == "in-process rank 2");  // the transport's name for it, never "unknown"
      CHECK(std::string(e.what()).find("did not answer") != std::string::npos);
    }
  };
  auto start = Clock::now();
  check_names_2(
      cluster.run([&](std::size_t r) { (void)cluster.ranks[r]->probe.measure_links(); }, talking));
  CHECK(since(start) < 2.0);
  sync::NodeProfile local{{0, 0, 0}, {0, 0, 0}, {}, {}, 0};
  check_names_2(cluster.run(
      [&](std::size_t r) {
        sync::NodeProfile mine = local;
        (void)cluster.ranks[r]->probe.exchange(mine);
      },
      talking));
  check_names_2(cluster.run([&](std::size_t r) { cluster.ranks[r]->probe.barrier(5); }, talking));
}

TEST_CASE("a rank silent after its link was measured is named with what was measured",
          "[sync][probe][inproc]") {
  // Issue 31, item 3: a time-out names the peer's address and its measured link, never
  // "(unknown)" and never without the numbers when there are some.
  sync::LinkProbeOptions options;
  options.timeout_s = 0.5;
  Cluster cluster(3, options);
  for (const auto& error :
       cluster.run([&](std::size_t r) { (void)cluster.ranks[r]->probe.measure_links(); }))
    REQUIRE(error == nullptr);
  const auto errors =
      cluster.run([&](std::size_t r) { cluster.ranks[r]->probe.barrier(7); }, {0, 1});
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    const PeerError e = peer_error(errors[r]);
    CHECK(e.rank() == 2);
    CHECK_THAT(std::string(e.what()),
               Catch::Contains("peer rank 2 (in-process rank 2): did not answer the link probe") &&
                   Catch::Contains("; its link measured alpha ") && Catch::Contains(" ms, B ") &&
                   Catch::Contains(" MB/s (a transfer of "));
  }
}

// ---- loopback TCP (hidden: real sockets, run by hand and for the timings reported) ----

namespace {

void tcp_probe(std::size_t n, double max_send_rate) {
  const auto ports = gradmesh::testing::free_ports(n);
  std::vector<std::unique_ptr<net::TcpTransport>> transports;
  std::vector<std::unique_ptr<Rank>> ranks;
  sync::LinkProbeOptions probe_options;
  if (max_send_rate > 0) probe_options.max_send_rate = max_send_rate;
  for (std::size_t r = 0; r < n; ++r) {
    net::TransportOptions o;
    o.rank = r;
    for (const auto port : ports)
      o.peers.push_back({"127.0.0.1", static_cast<std::uint16_t>(port)});
    o.job_name = "probe-test";
    o.config_hash = 0x5eed;
    o.connect_timeout_s = 10;
    o.lanes = sync::lane_names();
    o.max_send_rate = max_send_rate;
    transports.push_back(std::make_unique<net::TcpTransport>(o));
    ranks.push_back(std::make_unique<Rank>(transports.back().get(), r, n, probe_options));
  }
  std::vector<sync::NodeProfile> rows(n);
  std::vector<double> took(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        transports[r]->start();
        ranks[r]->probe.barrier(1);
        const auto start = Clock::now();
        rows[r] = ranks[r]->probe.measure_links();
        took[r] = since(start);
        ranks[r]->probe.barrier(2);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::thread> leaving;
  for (auto& t : transports) leaving.emplace_back([&t] { t->shutdown(5.0); });
  for (auto& t : leaving) t.join();
  rethrow_any(errors);
  for (std::size_t r = 0; r < n; ++r) {
    std::printf("tcp n=%zu rate=%.3g rank %zu: measure_links %.3f s;", n, max_send_rate, r,
                took[r]);
    for (std::size_t p = 0; p < n; ++p) {
      if (p == r) continue;
      std::printf("  ->%zu alpha %.1f us B %.3g B/s", p, rows[r].alpha[p] * 1e6,
                  rows[r].bandwidth[p]);
      CHECK(rows[r].bandwidth[p] > 0);
    }
    std::printf("\n");
    CHECK(took[r] < 2.0);
  }
}

}  // namespace

TEST_CASE("link probe on loopback TCP, 2-4 ranks (timings)", "[.][tcp][sync][probe]") {
  for (std::size_t n = 2; n <= 4; ++n) tcp_probe(n, 0);
  tcp_probe(4, 12.5e6);  // net.max_send_rate = 100 Mbit/s: B should read about 12.5e6
}

TEST_CASE("link probe timings on the in-process transport", "[.][timing][sync][probe]") {
  for (std::size_t n = 2; n <= 4; ++n) {
    std::printf("inproc n=%zu: measure_links %.4f s\n", n, measure_exchange_combine(n));
  }
}

namespace {

// A transfer's arrivals after its first message: gaps in ms, `bytes` each.
std::vector<std::pair<Clock::duration, std::size_t>> arrivals(std::initializer_list<double> gaps_ms,
                                                              std::size_t bytes) {
  std::vector<std::pair<Clock::duration, std::size_t>> out;
  for (const double ms : gaps_ms)
    out.emplace_back(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms)),
        bytes);
  return out;
}

double steady_ms(const std::pair<Clock::duration, std::uint64_t>& steady) {
  return std::chrono::duration<double, std::milli>(steady.first).count();
}

}  // namespace

TEST_CASE("a transfer's steady part: the messages before a stall, not a clump or a burst",
          "[sync][probe]") {
  using sync::probe::detail::steady_part;
  // Gaps measured at 10 Mbit/s (tbf, 4 namespaces; messages of 24,953 bytes): a tail loss left
  // the link idle after three even gaps; the whole spread read 0.66 of the rate, these 0.94.
  const auto stalled = steady_part(arrivals({21.6, 20.1, 21.8, 43.2, 74.3, 32.0, 2.2, 0.0}, 24953));
  CHECK(steady_ms(stalled) == Approx(63.5).epsilon(0.01));
  CHECK(stalled.second == 3 * 24953);
  // A loss recovered by fast retransmit: the bytes behind the hole come in one clump, the link
  // was busy all along, and the whole spread (0.95 of the rate) is right: no steady part.
  CHECK(steady_part(arrivals({27.8, 98.1, 19.2, 16.9, 15.7, 14.6, 0.0}, 32768)).second == 0);
  // A shaper's burst allowance (tbf's 32 KB at 1 Mbit/s) lets the first messages through fast;
  // the even gaps after it are the rate, not a stall.
  CHECK(steady_part(arrivals({1.0, 1.2, 105, 104, 106, 105, 104}, 12000)).second == 0);
  // Even all along: the whole spread reads right.
  CHECK(steady_part(arrivals({21.7, 20.4, 21.1, 22.0, 21.8, 20.9}, 24953)).second == 0);
  // Too few gaps to call any of them a stall.
  CHECK(steady_part(arrivals({21.7, 90.0}, 24953)).second == 0);
}
