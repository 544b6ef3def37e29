// Tests for sync/compress/sparse_scheme.h on the in-process transport: the dense layers of a
// synthetic job fixed to top-k or random-k, on 2 to 5 nodes.

#include "sync/compress/sparse_scheme.h"

#include <cmath>
#include <tuple>

#include <catch2/catch.hpp>

#include "sync/compress/sparse_model.h"
#include "tests/sync/compress/reference_codec_device.h"
#include "tests/sync/support/compressed_job.h"

using namespace gradmesh;
using gradmesh::testing::InProcCluster;
using gradmesh::testing::parameters;
using gradmesh::testing::SyntheticJob;

namespace {

constexpr std::uint64_t kIterations = 6;

/// A job whose dense layers (0, 2, 4) are `method`'s (topk or randomk) at `ratio`, uncompressed
/// for the first `start_iteration` iterations.
SyntheticJob sparse_job(const std::string& method, double ratio, std::int64_t start_iteration = 0,
                        bool momentum_correction = true) {
  return testing::compressed_job(method,
                                 {{"compression.method", method},
                                  {"compression.ratio", ratio},
                                  {"compression.start_iteration", start_iteration},
                                  {"compression.momentum_correction", momentum_correction}});
}

/// The nodes' parameters, checked equal on every node, with no message rejected.
std::vector<std::vector<float>> identical_replicas(InProcCluster& cluster, std::size_t nodes) {
  const auto all = testing::replicas(cluster);
  for (std::size_t r = 0; r < nodes; ++r) {
    CHECK(all[r] == all[0]);
    CHECK(cluster.node(r).stage().rejected_messages() == 0);
  }
  return all;
}

}  // namespace

TEST_CASE("top-k and random-k at ratio 1 equal training on the union batches",
          "[compress][inproc]") {
  // Every entry is kept: nothing is left in the residual, the sum of the decodings is the sum of
  // the gradients (or, with DGC's momentum correction, of the nodes' velocities, each zeroed where
  // sent: masked everywhere, so it restarts every step), and the update is their mean. Momentum
  // 0.9: without the correction the optimizer's momentum steps on the mean, as the union's SGD;
  // with it, nothing carries over, as the union's SGD without momentum.
  for (const bool correction : {true, false}) {
    for (const std::string method : {"topk", "randomk"}) {
      const SyntheticJob job = sparse_job(method, 1.0, 0, correction);
      SyntheticJob plain = job;
      if (correction) plain.sgd.momentum = 0.0f;
      for (const std::size_t nodes : {2, 3, 4, 5}) {
        INFO(method << ", " << nodes << " nodes, momentum correction " << correction);
        const auto reference = testing::union_reference(plain, nodes, kIterations);
        InProcCluster cluster(job, "auto", nodes);
        cluster.train(kIterations);
        for (std::size_t r = 0; r < nodes; ++r) {
          INFO("rank " << r);
          CHECK(testing::max_abs_difference(parameters(cluster, r), reference) <= 1e-5);
          CHECK(cluster.node(r).stage().rejected_messages() == 0);
        }
        const auto plan = cluster.node(0).stage().plan();
        CHECK(plan[2].scheme == (method == "topk" ? "top-k 100%" : "random-k 100%"));
        // Nothing lost (random-k's figure is ||p||^2 less the kept entries' squares: rounding).
        CHECK(cluster.node(0).stage().epoch_figures().at("compression_error.dense2") < 1e-6);
      }
    }
  }
}

TEST_CASE("top-k and random-k at 10%: identical replicas, the bytes predicted, the error shown",
          "[compress][inproc]") {
  for (const std::string method : {"topk", "randomk"}) {
    INFO(method);
    const SyntheticJob job = sparse_job(method, 0.1);
    const std::size_t nodes = 3;
    const auto reference = testing::union_reference(job, nodes, kIterations);
    InProcCluster cluster(job, "auto", nodes);
    cluster.train(kIterations);
    const auto all = identical_replicas(cluster, nodes);
    // A tenth of each gradient a step (the rest held back): not the union batches' training.
    CHECK(testing::max_abs_difference(all[0], reference) > 1e-4);
    // What went out on the scheme's lane is what the plan predicted, iteration by iteration.
    double predicted = 0;
    for (const sync::LayerPlan& row : cluster.node(0).stage().plan()) {
      if (row.scheme == (method == "topk" ? "top-k 10%" : "random-k 10%")) {
        predicted += row.predicted_bytes_sent;
      }
    }
    const std::string lane = method;  // a compressed scheme's lane is its compressor's name
    const double sent =
        static_cast<double>(cluster.transport(0).counters().bytes_sent_by_lane.at(lane));
    CHECK(sent == Approx(predicted * kIterations).epsilon(0.02));
    // Each layer loses most of p = g + e to the residual, which holds some iterations' worth of
    // gradient; a second call, with no iteration between, has none.
    auto figures = cluster.node(0).stage().epoch_figures();
    for (const char* layer : {"dense0", "dense2", "dense4"}) {
      INFO(layer);
      const double error = figures.at(std::string("compression_error.") + layer);
      CHECK(error > 0.1);
      CHECK(error < 1.0);
      CHECK(figures.at(std::string("residual_norm.") + layer) > 0.0);
      CHECK(figures.at(std::string("residual_ratio.") + layer) > 0.5);
    }
    CHECK(cluster.node(0).stage().epoch_figures().empty());
  }
}

TEST_CASE("sign and qsgd by all-gather: identical replicas, the bytes predicted, the error shown",
          "[compress][inproc]") {
  // Compressors the schemes know by their traits alone (issue 56): dense, no shared indices, so
  // each node's encoding goes to every peer and the n decodings are summed in rank order.
  for (const auto& [method, bits, scheme] :
       {std::tuple{std::string("sign"), 4, std::string("sign")},
        std::tuple{std::string("qsgd"), 2, std::string("qsgd 2-bit")},
        std::tuple{std::string("qsgd"), 8, std::string("qsgd 8-bit")}}) {
    INFO(scheme);
    const SyntheticJob job = testing::compressed_job(
        method, {{"compression.method", method}, {"compression.bits", std::int64_t{bits}}});
    const std::size_t nodes = 3;
    InProcCluster cluster(job, "auto", nodes);
    cluster.train(kIterations);
    (void)identical_replicas(cluster, nodes);
    double predicted = 0;
    std::size_t layers = 0;
    for (const sync::LayerPlan& row : cluster.node(0).stage().plan()) {
      if (row.scheme == scheme) {
        predicted += row.predicted_bytes_sent;
        ++layers;
      }
    }
    CHECK(layers == 3);  // the dense layers the job fixes to the compressor
    const double sent =
        static_cast<double>(cluster.transport(0).counters().bytes_sent_by_lane.at(method));
    CHECK(sent == Approx(predicted * kIterations).epsilon(0.02));
    // ||p - D(C(p))|| / ||p||: sign's is below 1 (||p||^2 - ||p||_1^2 / n, a chunk's part);
    // qsgd's is unbiased noise, which at 2 bits may exceed ||p|| itself.
    const double error = cluster.node(0).stage().epoch_figures().at("compression_error.dense2");
    CHECK(error > 0.0);
    if (method == "sign") CHECK(error < 1.0);
    CHECK(std::isfinite(error));
  }
}

TEST_CASE("sparse warm-up iterations go uncompressed, then compression starts",
          "[compress][inproc]") {
  const std::size_t nodes = 2;
  for (const std::string method : {"topk", "randomk"}) {
    INFO(method);
    {  // warm-up over the whole run: the union batches' training
      const SyntheticJob job = sparse_job(method, 0.1, kIterations);
      const auto reference = testing::union_reference(job, nodes, kIterations);
      InProcCluster cluster(job, "auto", nodes);
      cluster.train(kIterations);
      CHECK(testing::max_abs_difference(parameters(cluster, 0), reference) <= 1e-5);
      CHECK(parameters(cluster, 1) == parameters(cluster, 0));
      CHECK(cluster.node(0).stage().epoch_figures().empty());  // nothing compressed
    }
    {  // two warm-up iterations, then 10%: replicas agree, and leave the reference
      const SyntheticJob job = sparse_job(method, 0.1, 2);
      const auto reference = testing::union_reference(job, nodes, kIterations);
      InProcCluster cluster(job, "auto", nodes);
      cluster.train(kIterations);
      CHECK(parameters(cluster, 1) == parameters(cluster, 0));
      CHECK(testing::max_abs_difference(parameters(cluster, 0), reference) > 1e-4);
      CHECK(cluster.node(0).stage().rejected_messages() == 0);
    }
  }
}

TEST_CASE("a malformed top-k message is rejected and counted, and training goes on",
          "[compress][inproc]") {
  const SyntheticJob job = sparse_job("topk", 0.1);
  const std::size_t nodes = 2;
  InProcCluster plain(job, "auto", nodes);
  plain.train(2);
  InProcCluster cluster(job, "auto", nodes);
  const auto lane = static_cast<std::uint8_t>(sync::lane_id("topk"));
  // Layer slot 1 (dense2: 16 x 24 + 16 = 400 floats, k = 40): a payload of the wrong size, and
  // one of the right size whose indices are out of range; then an unknown gather.
  const auto payload = [](std::size_t bytes, std::byte fill) {
    net::Payload p = net::Payload::allocate(bytes);
    std::fill(p.mutable_bytes().begin(), p.mutable_bytes().end(), fill);
    return p;
  };
  cluster.transport(1).send(0, net::Message{lane, 17, 0, 0, payload(12, std::byte{0}), 0});
  cluster.transport(1).send(0, net::Message{lane, 17, 0, 0, payload(320, std::byte{0xff}), 0});
  cluster.transport(1).send(0, net::Message{lane, 900, 0, 0, payload(320, std::byte{0}), 0});
  cluster.train(2);
  CHECK(cluster.node(0).stage().rejected_messages() == 3);
  // None of them reached a sum: the run equals one that never saw them.
  CHECK(parameters(cluster, 0) == parameters(plain, 0));
  CHECK(parameters(cluster, 1) == parameters(cluster, 0));
}

TEST_CASE("top-k and random-k on a device model train as on the host, bit for bit",
          "[compress][inproc][device]") {
  // The model on the reference device (the emulated device with the codec kernels): without DGC's
  // correction each layer encodes the device's gradient with the device codec; with it, the host
  // copy on the host. Two warm-up iterations first. Either way the replicas are the host's bits.
  for (const bool correction : {false, true}) {
    for (const std::string method : {"topk", "randomk"}) {
      INFO(method << ", momentum correction " << correction);
      const SyntheticJob job = sparse_job(method, 0.1, 2, correction);
      SyntheticJob on_device = job;
      on_device.backend = [] { return std::make_unique<testing::ReferenceCodecDevice>(); };
      const std::size_t nodes = 3;
      InProcCluster host(job, "auto", nodes), device(on_device, "auto", nodes);
      host.train(kIterations);
      device.train(kIterations);
      REQUIRE(device.node(0).stage().plan()[2].scheme ==
              (method == "topk" ? "top-k 10%" : "random-k 10%"));
      for (std::size_t r = 0; r < nodes; ++r) {
        INFO("rank " << r);
        CHECK(parameters(device, r) == parameters(host, r));
        // Without DGC's correction the device codec encoded; with it, the host copy's codec.
        CHECK((dynamic_cast<testing::ReferenceCodecDevice&>(device.node(r).model().backend())
                   .encodes.load() > 0) == !correction);
      }
      CHECK(device.node(0).stage().epoch_figures().at("compression_error.dense2") ==
            Approx(host.node(0).stage().epoch_figures().at("compression_error.dense2"))
                .epsilon(1e-9));
    }
  }
}
