#pragma once
// The BSP equivalence harness of the end-to-end tests: single-process SGD references (on the union
// batches, per shard, with SFB's rebuild, sparsified or PS-coded layers, or SyncBN's exchanging
// shards) and check_equivalence, which runs a job's node processes and compares their replicas
// with the reference (ps_training_test.cpp, graph_equivalence_test.cpp).

#include <signal.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string_view>
#include <thread>
#include "sync/compress/codec.h"
#include "sync/compress/codec_profile.h"
#include "sync/compress/sparse_scheme.h"
#include "sync/poseidon/sf_rebuild.h"
#include "tasks/cpu/blas.h"
#include "tasks/data/fashion_mnist.h"
#include "tasks/data/shard_sampler.h"
#include "tasks/layers/batch_norm.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/model.h"
#include "tasks/optim/lr_schedule.h"
#include "tasks/optim/sgd.h"
#include "tests/apps/node/bsp_job.h"
#include "tests/apps/node/cluster.h"
#include "tests/apps/node/peer_failure.h"
#include "tests/tasks/thread_exchange.h"
#include "topo/kv_placement.h"

#include <catch2/catch.hpp>

namespace gradmesh::testing::equivalence {

inline const gradmesh::tasks::TrainTest& fashion_mnist() {
  static const auto data = gradmesh::tasks::load_fashion_mnist(kData);
  return data;
}

/// The training set as data.normalize = "standardize" gives it to the nodes.
inline const gradmesh::tasks::Dataset& standardized_train() {
  static const auto train = [] {
    auto d = fashion_mnist().train;
    gradmesh::tasks::standardize(d, gradmesh::tasks::fit_standardization(d));
    return d;
  }();
  return train;
}

/// How the reference forms the gradient of the union batch.
enum class Reduction {
  kUnionBatch,     ///< one forward/backward on the n*K images
  kShardMean,      ///< each rank's K images on their own, the n gradients summed in rank order and
                   ///< scaled by 1/n (as a KV shard reduces): the same mean, the nodes' rounding.
                   ///< On one BLAS thread, as the nodes must be (compute.threads = 1): a GEMM's
                   ///< rounding depends on how many threads share it (OpenBLAS's AVX-512 kernels)
  kSyncBatchNorm,  ///< as kShardMean, but the n shards run at once, one model a thread, their
                   ///< batch_norm layers exchanging statistics (SyncBN, model.sync_batch_norm)
                   ///< as the nodes do: the nodes' algorithm and rounding in one process
};

/// Layers a node exchanged through a compressor with error feedback (sync/compress/sparse_scheme.h:
/// top-k or random-k at one ratio, sign, qsgd at some bits), with DGC's momentum correction (the
/// default when the job has momentum) or without.
struct SparseLayer {
  std::size_t layer = 0;
  std::string method = "topk";
  double ratio = 1.0;
  std::int64_t bits = 4;
  bool momentum_correction = true;
};

/// Layers a node synchronised by compressed PS (sync/ps/ps_scheme.h with a wire codec), in KV
/// chunks of `chunk_floats` placed over those layers alone (the scheme's own placement).
struct CodedPs {
  std::string method = "none";
  std::size_t chunk_floats = 0;
  std::vector<std::size_t> layers;
};

/// Single-process SGD on the union of the n nodes' batches: one model, the batches of rank
/// 0..n-1 stacked in rank order. kShardMean with `sfb_layers`: those (dense) layers' gradients
/// are rebuilt as Poseidon's SFB rebuilds them, one GEMM over every shard's sufficient factors
/// stacked in rank order (sync::rebuild_dense_gradient), not summed per shard. kShardMean with
/// `sparse_layers`: each shard's gradient of those layers goes through its own codec with error
/// feedback (one per rank and layer, as each node has), and the n decodings are summed in rank
/// order (issue 28: "a single-process reference that applies the same algorithm to the n nodes'
/// gradients in rank order"); with momentum correction each rank's velocity u = m u + (g + wd w)
/// is what goes through the codec, u is zeroed where sent, and the layer steps w -= lr * mean
/// without momentum (DGC, as the nodes run it). kShardMean with `coded_ps`: per KV chunk of those
/// layers, each rank but the owner sends its chunk through its own codec with error feedback, the
/// owner steps its master copy on the sum of the decodings in rank order, and the replica adds the
/// decoded change master - replica (the owner's codec without residual).
inline std::vector<float> reference_parameters(const Job& job, std::size_t nodes,
                                               Reduction reduction = Reduction::kUnionBatch,
                                               const std::vector<std::size_t>& sfb_layers = {},
                                               const std::vector<SparseLayer>& sparse_layers = {},
                                               const CodedPs& coded_ps = {}) {
  const auto& train = job.standardize ? standardized_train() : fashion_mnist().train;
  const auto specs = gradmesh::tasks::parse_layer_specs(job.layers);
  const bool union_batch = reduction == Reduction::kUnionBatch;
  // kSyncBatchNorm: the shards' models, one a thread, their batch_norm layers exchanging.
  gradmesh::testing::ThreadGather gather(nodes);
  std::vector<std::unique_ptr<gradmesh::testing::ThreadExchange>> exchanges;
  std::vector<std::unique_ptr<gradmesh::tasks::Model>> shard_models;
  gradmesh::tasks::Model model(specs, gradmesh::tasks::sample_shape(train),
                               union_batch ? nodes * job.batch : job.batch, job.seed);
  if (!union_batch) gradmesh::tasks::cpu::set_blas_threads(1);
  for (std::size_t r = 0; reduction == Reduction::kSyncBatchNorm && r < nodes; ++r) {
    exchanges.push_back(std::make_unique<gradmesh::testing::ThreadExchange>(gather, r));
    shard_models.push_back(std::make_unique<gradmesh::tasks::Model>(
        specs, gradmesh::tasks::sample_shape(train), job.batch, job.seed));
    for (std::size_t l = 0; l < shard_models[r]->num_layers(); ++l) {
      if (auto* bn = dynamic_cast<gradmesh::tasks::BatchNorm*>(&shard_models[r]->layer(l))) {
        bn->set_statistics_exchange(exchanges[r].get());
      }
    }
  }
  const gradmesh::tasks::Sgd sgd({static_cast<float>(job.lr), static_cast<float>(job.momentum),
                                  static_cast<float>(job.weight_decay)});
  const std::size_t parameters = model.parameter_count();
  std::vector<float> velocity(parameters, 0.0f), scratch(parameters);
  std::vector<std::vector<float>> shard_gradients(nodes, std::vector<float>(parameters));
  REQUIRE((sfb_layers.empty() || (!union_batch && (nodes & (nodes - 1)) == 0)));
  std::vector<std::vector<float>> factors_u, factors_v;  // per SFB layer: every shard's U, V
  for (const std::size_t l : sfb_layers) {
    factors_u.emplace_back(nodes * job.batch * model.layer(l).output_size());
    factors_v.emplace_back(nodes * job.batch * model.layer(l).input_size());
  }
  // Per sparse layer: each rank's codec, the encoding, the sum of the decodings.
  std::vector<std::vector<gradmesh::sync::compress::Codec>> codecs;
  std::vector<std::vector<std::byte>> encodings;
  std::vector<std::vector<float>> sparse_sums;
  // Per sparse layer with DGC's momentum correction: each rank's velocity (else empty).
  std::vector<std::vector<std::vector<float>>> dgc_velocity;
  const auto momentum = static_cast<float>(job.momentum);
  const auto weight_decay = static_cast<float>(job.weight_decay);
  for (const SparseLayer& sparse : sparse_layers) {
    const std::size_t count = model.layer_gradients(sparse.layer).size();
    const bool dgc = sparse.momentum_correction && momentum > 0.0f;
    dgc_velocity.emplace_back(dgc ? nodes : 0, std::vector<float>(count, 0.0f));
    codecs.emplace_back();
    for (std::size_t r = 0; r < nodes; ++r) {
      codecs.back().emplace_back(sparse.method, count,
                                 gradmesh::sync::compress::CompressorParams{
                                     .ratio = sparse.ratio,
                                     .seed = gradmesh::sync::randomk_seed(sparse.layer),
                                     .rank = r,
                                     .bits = sparse.bits},
                                 true);
    }
    encodings.emplace_back(codecs.back()[0].encoded_bytes());
    sparse_sums.emplace_back(count);
  }
  // Compressed PS: its chunks, each rank's push codec and the owner's change codec per chunk, the
  // master copy (the replica is the model's parameters).
  std::vector<gradmesh::topo::KvChunk> coded_chunks;
  std::vector<std::vector<gradmesh::sync::compress::Codec>> push_codecs(nodes);
  std::vector<gradmesh::sync::compress::Codec> change_codecs;
  std::vector<float> master(model.parameters().begin(), model.parameters().end());
  std::vector<std::uint8_t> coded_floats;  // 1 where a float is in a compressed PS chunk
  if (!coded_ps.layers.empty()) {
    REQUIRE(!union_batch);
    std::vector<gradmesh::topo::ParameterBlock> blocks;
    for (const std::size_t l : coded_ps.layers) {
      blocks.push_back({l, model.parameter_offset(l), model.layer(l).parameter_count()});
    }
    const gradmesh::topo::KvPlacement placement(blocks, nodes, coded_ps.chunk_floats);
    coded_chunks = placement.chunks();
    coded_floats.assign(parameters, 0);
    for (const gradmesh::topo::KvChunk& c : coded_chunks) {
      std::fill_n(coded_floats.begin() + static_cast<std::ptrdiff_t>(c.offset), c.size, 1);
    }
    for (const gradmesh::topo::KvChunk& c : coded_chunks) {
      for (std::size_t r = 0; r < nodes; ++r) {
        push_codecs[r].emplace_back(coded_ps.method, c.size,
                                    gradmesh::sync::compress::CompressorParams{.rank = r}, true);
      }
      change_codecs.emplace_back(coded_ps.method, c.size,
                                 gradmesh::sync::compress::CompressorParams{}, false);
    }
  }
  std::vector<std::byte> wire;
  std::vector<float> change;
  std::vector<gradmesh::tasks::ShardSampler> samplers;
  for (std::size_t r = 0; r < nodes; ++r)
    samplers.emplace_back(train.count, nodes, r, job.batch, job.seed);
  const std::size_t per_epoch = samplers[0].iterations_per_epoch();
  const gradmesh::tasks::LrSchedule schedule{gradmesh::tasks::parse_lr_schedule(job.schedule),
                                             static_cast<float>(job.lr),
                                             std::min<std::uint64_t>(job.iterations, per_epoch)};
  std::vector<std::size_t> indices(job.batch);
  std::vector<float> x(nodes * job.batch * train.features);
  std::vector<std::int32_t> y(nodes * job.batch);
  for (std::size_t it = 0; it < job.iterations; ++it) {
    for (std::size_t r = 0; r < nodes; ++r) {
      samplers[r].batch_indices(it / per_epoch, it % per_epoch, indices);
      gradmesh::tasks::gather_batch(
          train, indices,
          std::span(x).subspan(r * job.batch * train.features, job.batch * train.features),
          std::span(y).subspan(r * job.batch, job.batch));
    }
    if (union_batch) {
      model.forward_backward(x, y);
      sgd.step(model.parameters(), model.gradients(), velocity, schedule.at(it));
      continue;
    }
    std::vector<std::span<const float>> views;
    if (!shard_models.empty()) {  // SyncBN: every shard at once, the replica's parameters
      std::vector<std::thread> threads;
      for (std::size_t r = 0; r < nodes; ++r) {
        std::ranges::copy(model.parameters(), shard_models[r]->parameters().begin());
        threads.emplace_back([&, r] {
          shard_models[r]->forward_backward(
              std::span<const float>(x).subspan(r * job.batch * train.features,
                                                job.batch * train.features),
              std::span<const std::int32_t>(y).subspan(r * job.batch, job.batch));
        });
      }
      for (std::thread& t : threads) t.join();
    }
    for (std::size_t r = 0; r < nodes; ++r) {
      if (!shard_models.empty()) {
        std::ranges::copy(shard_models[r]->gradients(), shard_gradients[r].begin());
        views.emplace_back(shard_gradients[r]);
        continue;
      }
      model.forward_backward(std::span<const float>(x).subspan(r * job.batch * train.features,
                                                               job.batch * train.features),
                             std::span<const std::int32_t>(y).subspan(r * job.batch, job.batch));
      std::copy(model.gradients().begin(), model.gradients().end(), shard_gradients[r].begin());
      views.emplace_back(shard_gradients[r]);
      for (std::size_t i = 0; i < sfb_layers.size(); ++i) {
        const auto u = model.layer_output_gradient(sfb_layers[i], job.batch);
        const auto v = model.layer_input(sfb_layers[i], job.batch);
        std::copy(u.begin(), u.end(),
                  factors_u[i].begin() + static_cast<std::ptrdiff_t>(r * u.size()));
        std::copy(v.begin(), v.end(),
                  factors_v[i].begin() + static_cast<std::ptrdiff_t>(r * v.size()));
      }
    }
    // An SFB layer's gradient g, as the nodes form it, into the scaled sum below: n g on rank 0's
    // view, 0 on the others ((n g + 0) / n is g exactly for n a power of 2).
    for (std::size_t i = 0; i < sfb_layers.size(); ++i) {
      const std::size_t l = sfb_layers[i];
      const std::size_t m = model.layer(l).output_size(), k = model.layer(l).input_size();
      const std::size_t offset = model.parameter_offset(l), count = m * k + m;
      std::vector<float> rebuilt(count);
      gradmesh::sync::rebuild_dense_gradient(
          factors_u[i], factors_v[i], nodes * job.batch, m, k, 1.0f / static_cast<float>(nodes),
          std::span(rebuilt).first(m * k), std::span(rebuilt).subspan(m * k));
      for (std::size_t r = 0; r < nodes; ++r) {
        for (std::size_t j = 0; j < count; ++j) {
          shard_gradients[r][offset + j] = r == 0 ? static_cast<float>(nodes) * rebuilt[j] : 0.0f;
        }
      }
    }
    // A sparse layer's decodings summed in rank order, s, into the scaled sum below: s on rank 0's
    // view, 0 on the others ((s + 0) / n is s / n exactly, as the nodes scale it). With DGC: each
    // rank's velocity encoded instead, and the layer stepped after the others (below).
    for (std::size_t i = 0; i < sparse_layers.size(); ++i) {
      const std::size_t offset = model.parameter_offset(sparse_layers[i].layer);
      const std::size_t count = sparse_sums[i].size();
      std::fill(sparse_sums[i].begin(), sparse_sums[i].end(), 0.0f);
      for (std::size_t r = 0; r < nodes; ++r) {
        std::span<const float> input = std::span(shard_gradients[r]).subspan(offset, count);
        if (!dgc_velocity[i].empty()) {
          std::vector<float>& u = dgc_velocity[i][r];
          const auto w = model.parameters().subspan(offset, count);
          for (std::size_t j = 0; j < count; ++j) {
            u[j] = momentum * u[j] + (input[j] + weight_decay * w[j]);
          }
          input = u;
        }
        (void)codecs[i][r].encode(input, encodings[i], it);
        codecs[i][r].decode_add(encodings[i], sparse_sums[i], it);
        if (!dgc_velocity[i].empty()) codecs[i][r].mask_sent(encodings[i], dgc_velocity[i][r], it);
      }
      for (std::size_t r = 0; r < nodes; ++r) {
        for (std::size_t j = 0; j < count; ++j) {
          shard_gradients[r][offset + j] = r == 0 ? sparse_sums[i][j] : 0.0f;
        }
      }
    }
    if (coded_chunks.empty()) {
      // The DGC layers step w -= lr * s / n alone: kept aside from the step of the others.
      std::vector<std::vector<float>> kept;
      for (std::size_t i = 0; i < sparse_layers.size(); ++i) {
        const auto w = model.layer_parameters(sparse_layers[i].layer);
        kept.emplace_back(dgc_velocity[i].empty() ? 0 : w.size());
        std::copy_n(w.begin(), kept.back().size(), kept.back().begin());
      }
      sgd.step_sum(model.parameters(), views, 1.0f / static_cast<float>(nodes), velocity, scratch,
                   schedule.at(it));
      const float lr = schedule.at(it), mean = 1.0f / static_cast<float>(nodes);
      for (std::size_t i = 0; i < sparse_layers.size(); ++i) {
        const auto w = model.layer_parameters(sparse_layers[i].layer);
        for (std::size_t j = 0; j < kept[i].size(); ++j) {
          w[j] = kept[i][j] - lr * (sparse_sums[i][j] * mean);
        }
      }
      continue;
    }
    // Compressed PS: the pushes that crossed a wire, decoded in place of the gradients.
    for (const gradmesh::topo::KvChunk& c : coded_chunks) {
      for (std::size_t r = 0; r < nodes; ++r) {
        if (r == c.owner) continue;
        gradmesh::sync::compress::Codec& codec = push_codecs[r][c.id];
        const auto g = std::span(shard_gradients[r]).subspan(c.offset, c.size);
        wire.resize(codec.encoded_bytes());
        (void)codec.encode(g, wire, 0);
        codec.decode(wire, g, 0);
      }
    }
    sgd.step_sum(master, views, 1.0f / static_cast<float>(nodes), velocity, scratch,
                 schedule.at(it));
    const std::span<float> replica = model.parameters();
    for (std::size_t i = 0; i < parameters; ++i) {  // every other layer: replica = master
      if (coded_floats[i] == 0) replica[i] = master[i];
    }
    for (const gradmesh::topo::KvChunk& c : coded_chunks) {
      const auto mine = replica.subspan(c.offset, c.size);
      change.resize(c.size);
      for (std::size_t i = 0; i < c.size; ++i) change[i] = master[c.offset + i] - mine[i];
      gradmesh::sync::compress::Codec& codec = change_codecs[c.id];
      wire.resize(codec.encoded_bytes());
      (void)codec.encode(change, wire, 0);
      codec.decode_add(wire, mine, 0);
    }
  }
  return {model.parameters().begin(), model.parameters().end()};
}

inline float max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  float most = 0;
  for (std::size_t i = 0; i < a.size(); ++i) most = std::max(most, std::abs(a[i] - b[i]));
  return most;
}

inline void check_equivalence(const std::string& strategy, std::size_t nodes,
                              const std::vector<std::string>& extra = {},
                              const std::string& scheme_expected = "", const Job& job = Job{},
                              Reduction reduction = Reduction::kUnionBatch,
                              float tolerance = 1e-5f) {
  Cluster cluster(strategy + "-equivalence-" + std::to_string(nodes), nodes,
                  config_text(job, strategy));
  std::vector<std::string> args = {"--save-parameters"};
  args.insert(args.end(), extra.begin(), extra.end());
  cluster.start(args);
  const auto codes = cluster.wait(std::chrono::seconds(120));
  INFO(cluster.all_logs());
  REQUIRE(codes == std::vector<int>(nodes, 0));
  // A codec on the host was measured at start-up, and the plan priced its encodes by that.
  constexpr std::string_view kMethodKey = "sync.compression.method=";
  for (const std::string& arg : extra) {
    if (!arg.starts_with(kMethodKey)) continue;
    const std::string method = arg.substr(kMethodKey.size());
    if (gradmesh::sync::compress::measures_codec(method)) {
      CHECK_THAT(cluster.all_logs(), Catch::Contains("compressor " + method + " measured"));
    }
  }

  // The layers the nodes synchronised by SFB: the reference rebuilds their gradients as they do.
  // The layers they sparsified ("top-k 10%", "random-k 10%"): the reference encodes them as they
  // do, at the ratio the plan names.
  std::vector<std::size_t> sfb_layers;
  std::vector<SparseLayer> sparse_layers;
  CodedPs coded_ps;
  if (reduction != Reduction::kUnionBatch) {
    const auto m0 = cluster.metrics(0);
    for (const auto& row : m0["plan"]) {
      const auto scheme = row["scheme"].get<std::string>();
      const auto layer = row["layer"].get<std::size_t>();
      if (scheme == "SFB") sfb_layers.push_back(layer);
      if (scheme.starts_with("PS ")) {  // "PS int8": compressed PS
        coded_ps.method = scheme.substr(3);
        coded_ps.chunk_floats = m0["sync"]["kv_chunk_floats"].get<std::size_t>();
        coded_ps.layers.push_back(layer);
      }
      for (const auto& [prefix, method] :
           {std::pair{std::string("top-k "), std::string("topk")},
            std::pair{std::string("random-k "), std::string("randomk")}}) {
        if (scheme.starts_with(prefix)) {
          sparse_layers.push_back({layer, method, std::stod(scheme.substr(prefix.size())) / 100.0});
        }
      }
      // Dense compressors: the optimizer's momentum on the decoded mean (no DGC correction).
      if (scheme == "sign") sparse_layers.push_back({layer, "sign", 1.0, 4, false});
      if (scheme.starts_with("qsgd ")) {  // "qsgd 4-bit"
        sparse_layers.push_back({layer, "qsgd", 1.0, std::stoll(scheme.substr(5)), false});
      }
    }
  }
  const auto expected =
      reference_parameters(job, nodes, reduction, sfb_layers, sparse_layers, coded_ps);
  const auto replica0 = cluster.parameters(0);
  REQUIRE(replica0.size() == expected.size());
  const float difference = max_abs_difference(replica0, expected);
  CHECK(difference <= tolerance);
  if (tolerance > 1e-5f) CHECK(difference > 0);  // a lossy wire: not the float run's bits
  for (std::size_t r = 1; r < nodes; ++r) CHECK(cluster.parameters(r) == replica0);
  for (std::size_t r = 0; r < nodes; ++r) {
    const auto m = cluster.metrics(r);
    CHECK(m["iterations"] == job.iterations);
    CHECK(m["strategy"] == strategy);
    CHECK(m["bytes_sent"].get<double>() > 0);
    CHECK(m["rejected_messages"] == 0);
    if (!scheme_expected.empty()) {
      bool found = false;
      for (const auto& row : m["plan"]) found = found || row["scheme"] == scheme_expected;
      CHECK(found);
    }
  }
}

}  // namespace gradmesh::testing::equivalence
