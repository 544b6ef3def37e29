// Tests for sync/compress/powersgd/powersgd_scheme.h on the in-process transport: the dense layers
// of a synthetic job fixed to PowerSGD, on 2 to 4 nodes.

#include "sync/compress/powersgd/powersgd_scheme.h"

#include <catch2/catch.hpp>

#include "sync/compress/powersgd/powersgd_model.h"
#include "tests/sync/support/compressed_job.h"

using namespace gradmesh;
using gradmesh::testing::InProcCluster;
using gradmesh::testing::InProcNode;
using gradmesh::testing::parameters;
using gradmesh::testing::SyntheticJob;

namespace {

constexpr std::uint64_t kIterations = 6;

/// A job whose dense layers (0, 2, 4) are PowerSGD's, of rank `rank`, uncompressed for the first
/// `start_iteration` iterations.
SyntheticJob powersgd_job(std::int64_t rank, std::int64_t start_iteration = 0) {
  return testing::compressed_job(std::string(sync::kPowerSgdScheme),
                                 {{"compression.method", std::string("powersgd")},
                                  {"compression.rank", rank},
                                  {"compression.start_iteration", start_iteration}});
}

}  // namespace

TEST_CASE("PowerSGD at full rank equals training on the union batches", "[compress][inproc]") {
  // Rank 64 >= the smaller side of every weight matrix (24 x 12, 16 x 24, 4 x 16): P_hat spans
  // each gradient's column space, so the mean gradient comes through whole.
  const SyntheticJob job = powersgd_job(64);
  for (const std::size_t nodes : {2, 3, 4}) {
    const auto reference = testing::union_reference(job, nodes, kIterations);
    InProcCluster cluster(job, "auto", nodes);
    cluster.train(kIterations);
    for (std::size_t r = 0; r < nodes; ++r) {
      INFO(nodes << " nodes, rank " << r);
      CHECK(testing::max_abs_difference(parameters(cluster, r), reference) <= 1e-5);
      CHECK(cluster.node(r).stage().rejected_messages() == 0);
    }
    CHECK(cluster.node(0).stage().epoch_figures().at("compression_error.dense2") < 1e-3);
    const auto plan = cluster.node(0).stage().plan();
    CHECK(plan[0].scheme == "PowerSGD r12");
    CHECK(plan[2].scheme == "PowerSGD r16");
    CHECK(plan[4].scheme == "PowerSGD r4");
  }
}

TEST_CASE("PowerSGD at rank 1 compresses, and every replica holds the same bits",
          "[compress][inproc]") {
  const SyntheticJob job = powersgd_job(1);
  const std::size_t nodes = 3;
  const auto reference = testing::union_reference(job, nodes, kIterations);
  InProcCluster cluster(job, "auto", nodes);
  cluster.train(kIterations);
  const auto first = parameters(cluster, 0);
  for (std::size_t r = 1; r < nodes; ++r) CHECK(parameters(cluster, r) == first);
  // A rank-1 update is not the mean gradient: the model moved elsewhere than uncompressed SGD.
  CHECK(testing::max_abs_difference(first, reference) > 1e-4);
  const auto plan = cluster.node(0).stage().plan();
  CHECK(plan[2].scheme == "PowerSGD r1");
  // The epoch's figures: each dense layer loses part of its gradient (rank 1 of 16 x 24), and its
  // residual holds some of it back; a second call, with no iteration between, has none.
  auto figures = cluster.node(0).stage().epoch_figures();
  for (const char* layer : {"dense0", "dense2", "dense4"}) {
    INFO(layer);
    const double error = figures.at(std::string("compression_error.") + layer);
    CHECK(error > 0.05);
    CHECK(error < 1.0);
    CHECK(figures.at(std::string("residual_ratio.") + layer) > 0.0);
  }
  CHECK(cluster.node(0).stage().epoch_figures().empty());
  CHECK(cluster.node(0).stage().rejected_messages() == 0);
}

TEST_CASE("PowerSGD's warm-up iterations go uncompressed, then compression starts",
          "[compress][inproc]") {
  const std::size_t nodes = 2;
  SECTION("warm-up over the whole run: the union batches' training") {
    const SyntheticJob job = powersgd_job(1, kIterations);
    const auto reference = testing::union_reference(job, nodes, kIterations);
    InProcCluster cluster(job, "auto", nodes);
    cluster.train(kIterations);
    CHECK(testing::max_abs_difference(parameters(cluster, 0), reference) <= 1e-5);
    CHECK(parameters(cluster, 1) == parameters(cluster, 0));
  }
  SECTION("two warm-up iterations, then rank 1: replicas agree, and leave the reference") {
    const SyntheticJob job = powersgd_job(1, 2);
    const auto reference = testing::union_reference(job, nodes, kIterations);
    InProcCluster cluster(job, "auto", nodes);
    cluster.train(kIterations);
    CHECK(parameters(cluster, 1) == parameters(cluster, 0));
    CHECK(testing::max_abs_difference(parameters(cluster, 0), reference) > 1e-4);
    CHECK(cluster.node(0).stage().rejected_messages() == 0);
  }
}
