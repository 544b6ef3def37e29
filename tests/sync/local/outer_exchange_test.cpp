// Tests for sync/local/outer_exchange.h (issue 57, item 3): the outer exchange's cost against its
// formulas, and local's rounds with a compressed Delta on 2-3 in-process nodes: fp16 on the ring
// and int8 gathered with error feedback against a single-process reference of the same rounds
// (the same compressor, the residual carried), the bytes on lane local_outer against the
// uncompressed exchange's, a compressed run's checkpoint refused by an uncompressed job.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "sync/compress/codec.h"
#include "sync/compress/compressor.h"
#include "sync/local/local_stage.h"
#include "sync/local/messages.h"
#include "sync/local/outer_exchange.h"
#include "sync/local/outer_optimizer.h"
#include "tests/sync/support/inproc_cluster.h"

using namespace gradmesh;

namespace {

testing::SyntheticJob compressed_local_job(std::int64_t steps, const std::string& method,
                                           const std::string& overlap = "off") {
  testing::SyntheticJob job;
  job.options.values.set("local.steps", steps);
  job.options.values.set("local.outer", std::string("nesterov"));
  job.options.values.set("compression.method", method);
  job.options.values.set("local.overlap", overlap);
  return job;
}

sync::CompressionOptions compression(const std::string& method) {
  sync::CompressionOptions c;
  c.method = method;
  return c;
}

std::uint64_t lane_bytes(testing::InProcCluster& cluster, std::size_t nodes) {
  std::uint64_t sent = 0;
  for (std::size_t r = 0; r < nodes; ++r) {
    sent += cluster.transport(r).counters().bytes_sent_by_lane.at(std::string(sync::local::kLane));
  }
  return sent;
}

}  // namespace

TEST_CASE("the outer exchange's cost: a float ring, a 16-bit ring, a gathered encoding",
          "[sync][local][planner]") {
  const topo::ClusterCost cluster{4, topo::LinkCost{1e-4, 12.5e6, 2e-6}, 64.0, 1e10, 1e-9};
  const std::size_t m = 1 << 20;
  const topo::AllReduceCost ring = topo::ring_allreduce_cost(cluster.link, 4, 64.0);
  const sync::local::OuterCost none =
      sync::local::outer_exchange_cost(cluster, m, compression("none"));
  CHECK(none.seconds == Approx(ring.seconds(4.0 * m)));
  CHECK(none.bytes == Approx(topo::ring_allreduce_bytes(4.0 * m, 4, 64.0)));

  const sync::local::OuterCost fp16 =
      sync::local::outer_exchange_cost(cluster, m, compression("fp16"));
  const auto half_bytes = static_cast<double>(
      sync::compress::segment_format("fp16", "sync.compression.method").encoded_bytes(m));
  CHECK(fp16.bytes == Approx(topo::ring_allreduce_bytes(half_bytes, 4, 64.0)));
  CHECK(fp16.bytes < 0.51 * none.bytes);
  CHECK(fp16.seconds == Approx(ring.seconds(half_bytes) + m * (cluster.half_encode_seconds() +
                                                               cluster.half_decode_seconds())));

  const sync::CompressionOptions int8 = compression("int8");
  const sync::local::OuterCost gathered = sync::local::outer_exchange_cost(cluster, m, int8);
  const sync::compress::CompressorEntry& entry = sync::compress::compressor_entry("int8");
  const auto b = static_cast<double>(entry.encoded_bytes(m, sync::compressor_params(int8, 0, 0)));
  CHECK(gathered.bytes == Approx(3.0 * (b + 64.0)));
  const double step = m * cluster.step_seconds_per_float;
  CHECK(gathered.seconds ==
        Approx(1e-4 + 3 * 2e-6 + 3.0 * (b + 64.0) / 12.5e6 + entry.cost.encode_steps * step +
               4.0 * entry.cost.decode_steps * step));

  const topo::ClusterCost alone{1, cluster.link, 64.0, 1e10, 1e-9};
  CHECK(sync::local::outer_exchange_cost(alone, m, int8).bytes == 0);
  CHECK_THROWS_WITH(sync::local::outer_exchange_cost(cluster, m, compression("powersgd")),
                    Catch::Contains("weight matrix") && Catch::Contains("int8"));
  CHECK(sync::local::outer_exchange_name(compression("none")) == "ring of floats");
  CHECK(sync::local::outer_exchange_name(compression("bf16")) == "bf16 ring");
  CHECK(sync::local::outer_exchange_name(int8) == "int8 all-gather with error feedback");
}

TEST_CASE("local with Delta in fp16 on the ring: every replica the same, near the float run",
          "[sync][local][inproc]") {
  constexpr std::size_t kNodes = 3, kSteps = 2, kRounds = 3;
  testing::InProcCluster floats(compressed_local_job(kSteps, "none"), "local", kNodes);
  testing::InProcCluster half(compressed_local_job(kSteps, "fp16"), "local", kNodes);
  floats.train(kSteps * kRounds);
  half.train(kSteps * kRounds);
  const auto a = testing::replicas(floats), b = testing::replicas(half);
  for (std::size_t r = 1; r < kNodes; ++r) CHECK(b[r] == b[0]);
  CHECK(b[0] != a[0]);                                     // rounded on the way
  CHECK(testing::max_abs_difference(a[0], b[0]) <= 1e-3);  // fp16's 2^-11 of the Deltas
  // About half the bytes: 2 bytes a float and a scale a block, against 4.
  const double ratio = static_cast<double>(lane_bytes(half, kNodes)) /
                       static_cast<double>(lane_bytes(floats, kNodes));
  CHECK(ratio > 0.45);
  CHECK(ratio < 0.56);
  CHECK(half.node(0).stage().plan()[0].scheme == "local H=2, nesterov, fp16 ring");
}

TEST_CASE(
    "local with Delta in int8, gathered with error feedback, equals the rounds simulated "
    "in one process",
    "[sync][local][inproc]") {
  constexpr std::size_t kNodes = 2, kSteps = 3, kRounds = 3;
  const testing::SyntheticJob job = compressed_local_job(kSteps, "int8");
  testing::InProcCluster cluster(job, "local", kNodes);
  std::vector<float> start;
  {
    testing::InProcNode fresh(job, "none", 0, 1, nullptr, {0});
    const auto w = fresh.model().parameters();
    start.assign(w.begin(), w.end());
  }
  const sync::CompressionOptions int8 = compression("int8");
  std::vector<sync::compress::Codec> codecs;
  for (std::size_t r = 0; r < kNodes; ++r) {
    codecs.emplace_back("int8", start.size(), sync::compressor_params(int8, 0, r), true);
  }
  std::vector<std::vector<float>> velocity(kNodes);
  sync::OuterOptimizer outer(sync::OuterKind::kNesterov, 0.7, 0.9, start.size());
  std::vector<std::byte> wire(codecs[0].encoded_bytes());
  for (std::size_t round = 0; round < kRounds; ++round) {
    std::vector<float> mean(start.size(), 0.0f), delta(start.size());
    for (std::size_t r = 0; r < kNodes; ++r) {
      const std::vector<float> end =
          testing::train_alone(job, r, start, velocity[r], round * kSteps, kSteps);
      for (std::size_t i = 0; i < delta.size(); ++i) delta[i] = start[i] - end[i];
      codecs[r].encode(delta, wire, round);
      codecs[r].decode_add(wire, mean, round);
    }
    for (float& v : mean) v *= 1.0f / kNodes;
    outer.step(start, mean);
    cluster.train(kSteps);
    const auto replicas = testing::replicas(cluster);
    CHECK(replicas[0] == start);
    CHECK(replicas[1] == start);
    // The reference's codecs keep each node's residual across rounds, as the exchange does: the
    // replicas above can only match bit for bit if the cluster carried the same residuals.
    REQUIRE(codecs[0].residual().size() == start.size());
  }
  // A quarter of the float ring's bytes and less (1 byte a float and a scale a block, gathered
  // from 2 nodes: one copy each way).
  testing::InProcCluster floats(compressed_local_job(kSteps, "none"), "local", kNodes);
  floats.train(kSteps * kRounds);
  const double ratio = static_cast<double>(lane_bytes(cluster, kNodes)) /
                       static_cast<double>(lane_bytes(floats, kNodes));
  CHECK(ratio < 0.27);
  CHECK(ratio > 0.2);
}

TEST_CASE("local with a gathered Delta resumes bit for bit, and its checkpoint names the method",
          "[sync][local][inproc]") {
  constexpr std::size_t kNodes = 2;
  // int8 gathered, fp16 on the ring; overlapped too: the checkpoint then waits for the encoded
  // exchange in flight.
  std::vector<std::vector<std::byte>> saved;
  for (const std::string method : {"int8", "fp16"}) {
    for (const std::string overlap : {"off", "eager", "delayed"}) {
      INFO(method << ", overlap " << overlap);
      const testing::SyntheticJob job = compressed_local_job(2, method, overlap);
      testing::InProcCluster through(job, "local", kNodes);
      through.train(7);
      through.finish();
      // Stopped after one round (the residual set) and one inner step.
      const auto b = testing::resumed_replicas(job, "local", kNodes, 3, 7, true);
      const auto a = testing::replicas(through);
      for (std::size_t r = 0; r < kNodes; ++r) CHECK(a[r] == b[r]);
      CHECK(a[0] == a[1]);  // one model at the end
    }
  }
  // int8's checkpoint is refused by a job without a compressor.
  (void)testing::resumed_replicas(compressed_local_job(2, "int8"), "local", kNodes, 3, 3, false,
                                  &saved);

  testing::InProcCluster plain(compressed_local_job(2, "none"), "local", kNodes);
  CHECK_THROWS_WITH(testing::load_nodes(plain, saved), Catch::Contains("sync.compression.method"));
}

TEST_CASE("strategy local takes any registered compressor, not PowerSGD", "[sync][local]") {
  sync::SyncOptions options;
  options.values.set("compression.method", std::string("sign"));
  sync::StartFacts facts;
  facts.nodes = 2;
  CHECK_NOTHROW(sync::check_strategy("local", facts, options));
  options.values.set("compression.method", std::string("powersgd"));
  CHECK_THROWS_WITH(sync::check_strategy("local", facts, options),
                    Catch::Contains("powersgd") && Catch::Contains("it runs under allreduce"));
}

TEST_CASE("local's fragments each take their own compressed exchange, the residual each its own",
          "[sync][local][inproc]") {
  // fp16 (each fragment's ring on its own bucket) and int8 (each fragment's gathered encodings
  // on its own message kind): after a fragment's point it is the same bits on every node, and
  // the run resumes bit for bit (each fragment's residual saved).
  constexpr std::size_t kNodes = 2;
  for (const std::string method : {"fp16", "int8"}) {
    INFO(method);
    testing::SyntheticJob job = compressed_local_job(4, method, "delayed");
    job.options.values.set("local.fragments", std::int64_t{2});
    testing::InProcCluster cluster(job, "local", kNodes);
    const std::size_t n = cluster.node(0).model().parameter_count();
    const auto same = [&](std::size_t begin, std::size_t end) {
      const auto r = testing::replicas(cluster);
      return std::equal(r[0].begin() + static_cast<std::ptrdiff_t>(begin),
                        r[0].begin() + static_cast<std::ptrdiff_t>(end),
                        r[1].begin() + static_cast<std::ptrdiff_t>(begin));
    };
    cluster.train(2);  // fragment 0's point
    CHECK(same(0, n / 2));
    CHECK(!same(n / 2, n));
    cluster.train(2);  // fragment 1's
    CHECK(same(n / 2, n));
    CHECK(!same(0, n / 2));
    for (std::size_t r = 0; r < kNodes; ++r) {
      CHECK(cluster.node(r).stage().rejected_messages() == 0);
    }
    cluster.train(5);
    cluster.finish();
    const auto b = testing::resumed_replicas(job, "local", kNodes, 5, 9, true);
    const auto a = testing::replicas(cluster);
    for (std::size_t r = 0; r < kNodes; ++r) CHECK(a[r] == b[r]);
  }
}

TEST_CASE(
    "local re-split from 2 nodes to 3: the new rank takes a copy of rank 0's state with a zero "
    "residual, and the 3 go on",
    "[sync][local][inproc][resume]") {
  const testing::SyntheticJob job = compressed_local_job(2, "int8");
  std::vector<std::vector<std::byte>> saved;
  std::vector<std::vector<float>> residuals;
  {
    testing::InProcCluster two(job, "local", 2);
    two.train(3);  // one round done, a residual kept, one step into the next
    saved = testing::save_nodes(two);
    for (std::size_t r = 0; r < 2; ++r) {
      const auto& stage = dynamic_cast<const sync::LocalStage&>(two.node(r).stage());
      residuals.emplace_back(stage.residual(0).begin(), stage.residual(0).end());
    }
  }
  REQUIRE(std::any_of(residuals[0].begin(), residuals[0].end(), [](float e) { return e != 0; }));
  testing::SyntheticJob resumed_job = job;
  resumed_job.first_iteration = 3;
  testing::InProcCluster three(resumed_job, "local", 3);
  for (std::size_t r = 0; r < 3; ++r) {
    const std::size_t own = r < 2 ? r : 0;
    three.node(r).stage().prepare_resplit(2, r >= 2);
    engine::StateReader in(saved[own], "node");
    three.node(r).model().load_state(in);
    three.node(r).optimizer().load_state(in);
    three.node(r).stage().load_state(in);
  }
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("rank " << r);
    const auto& stage = dynamic_cast<const sync::LocalStage&>(three.node(r).stage());
    const std::vector<float> e(stage.residual(0).begin(), stage.residual(0).end());
    if (r < 2) {
      CHECK(e == residuals[r]);  // its own, bit for bit
    } else {
      CHECK(std::all_of(e.begin(), e.end(), [](float x) { return x == 0; }));
    }
  }
  three.train(1);  // the round's end: the exchange of three, and one model again
  const auto w = testing::replicas(three);
  CHECK(w[0] == w[1]);
  CHECK(w[0] == w[2]);
}

TEST_CASE(
    "local: a malformed outer encoding is rejected, counted, and fails the round naming its "
    "sender instead of leaving the job waiting",
    "[sync][local][inproc]") {
  testing::InProcCluster cluster(compressed_local_job(2, "int8"), "local", 2);
  const auto& lanes = sync::lane_names();
  const auto lane = static_cast<sync::LaneId>(
      std::find(lanes.begin(), lanes.end(), std::string(sync::local::kLane)) - lanes.begin());
  // Rank 1 sends rank 0 five bytes as its encoding of round 0 (an int8 encoding is much more).
  cluster.transport(1).send(0, net::Message{lane, sync::local::kGatheredKind, 0, 0,
                                            net::Payload::copy_of(std::vector<std::byte>(5))});
  CHECK_THROWS_WITH(cluster.train(2),
                    Catch::Contains("peer rank 1") && Catch::Contains("fails its check"));
  CHECK(cluster.node(0).stage().rejected_messages() == 1);
}

TEST_CASE("local with a compressed Delta ends mid-round on the replicas' mean, sent compressed",
          "[sync][local][inproc]") {
  constexpr std::size_t kNodes = 3;
  // The float ring's end, for its bytes.
  testing::InProcCluster floats(compressed_local_job(4, "none"), "local", kNodes);
  floats.train(6);
  const std::uint64_t floats_before = lane_bytes(floats, kNodes);
  floats.finish();
  const auto float_end = static_cast<double>(lane_bytes(floats, kNodes) - floats_before);
  for (const std::string method : {"fp16", "int8"}) {
    INFO(method);
    testing::InProcCluster cluster(compressed_local_job(4, method), "local", kNodes);
    cluster.train(6);  // a round and 2 inner steps
    const auto before = testing::replicas(cluster);
    CHECK(before[0] != before[1]);
    const std::uint64_t sent = lane_bytes(cluster, kNodes);
    cluster.finish();
    const auto after = testing::replicas(cluster);
    for (std::size_t r = 1; r < kNodes; ++r) CHECK(after[r] == after[0]);
    // The replicas' mean up to the compressor's rounding of the Deltas (and, int8, the residual
    // of the round before, which its error feedback sends now).
    std::vector<float> mean(before[0].size(), 0.0f);
    for (const auto& replica : before) {
      for (std::size_t i = 0; i < mean.size(); ++i) mean[i] += replica[i] / kNodes;
    }
    const double off = testing::max_abs_difference(after[0], mean);
    CHECK(off > 0.0);  // rounded on the way: not the float ring's mean
    CHECK(off <= 2e-3);
    // The end cost a round's exchange: well under the float ring of the replicas.
    const auto end = static_cast<double>(lane_bytes(cluster, kNodes) - sent);
    CHECK(end < 0.6 * float_end);
  }
}
