// End-to-end tests of model graphs under the BSP strategies: a residual network with batch
// normalization on node processes equals the reference that computes its statistics as the nodes
// do (per node shard by default; exchanged between the shards under model.sync_batch_norm).

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tasks/cpu/cpu_backend.h"
#include "tests/apps/node/bsp_job.h"
#include "tests/apps/node/equivalence.h"

using gradmesh::testing::Job;
using namespace gradmesh::testing::equivalence;

namespace {

/// A model graph (issue 29): a stem, an identity block and a projection block (stride 2, more
/// channels), global average pooling; 10 iterations on standardized images.
Job small_resnet() {
  Job resnet;
  resnet.layers = {"conv2d:4:3:1:1",  "batch_norm",      "relu",     "basic_block:4",
                   "basic_block:8:2", "global_avg_pool", "dense:10", "softmax_cross_entropy"};
  resnet.iterations = 10;
  resnet.standardize = true;
  return resnet;
}

}  // namespace

TEST_CASE(
    "a residual network with batch normalization on 2 node processes equals the per-shard "
    "reference under ps, allreduce and auto",
    "[e2e][equivalence][graph]") {
  // Batch normalization normalizes by each node's own batch,
  // so the reference is the per-shard one: each rank's 16 images on their own (their statistics),
  // the gradients summed in rank order (on one BLAS thread, as the nodes compute). The replicas'
  // parameters are the same bits on both nodes; the running statistics are each node's own.
  const Job resnet = small_resnet();
  for (const std::string strategy : {"ps", "allreduce", "auto"}) {
    SECTION(strategy) {
      check_equivalence(strategy, 2, {"--set", "compute.threads=1"}, "", resnet,
                        Reduction::kShardMean);
    }
  }
}

TEST_CASE(
    "with model.sync_batch_norm a residual network on 2 and 3 node processes equals the "
    "reference whose shards exchange their statistics",
    "[e2e][equivalence][graph][sync_batch_norm]") {
  // SyncBN: every batch_norm layer normalizes by all nodes' batches together. The reference runs
  // the nodes' algorithm in one process (kSyncBatchNorm: each shard's model on a thread, the
  // statistics gathered and combined as the nodes combine them, the gradients summed in rank
  // order); that it equals one model on the union batch is tests/tasks/layers/batch_norm_test's
  // (1e-6 on random data). Against the union batch directly the nodes were 3e-5 off after one
  // iteration of this job and 1e-2 after ten (the union's statistics are computed otherwise: in
  // float over all 32 images, not combined from the nodes' in double; which operation turns that
  // rounding into 3e-5 was not pinned down -- a ReLU input near 0 changing side is the likely
  // one); against the per-shard reference (the default's) 5e-3 after one.
  const Job resnet = small_resnet();
  const std::vector<std::string> args = {"--set", "model.sync_batch_norm=true", "--set",
                                         "compute.threads=1"};
  SECTION("allreduce, 2 nodes") {
    check_equivalence("allreduce", 2, args, "", resnet, Reduction::kSyncBatchNorm);
  }
  SECTION("ps, 3 nodes") {
    check_equivalence("ps", 3, args, "", resnet, Reduction::kSyncBatchNorm);
  }
  SECTION("auto, 2 nodes") {
    check_equivalence("auto", 2, args, "", resnet, Reduction::kSyncBatchNorm);
  }
  SECTION("a stack on the union batch") {
    // A stack without residual blocks keeps to the union batch itself within 1e-5 on the builtin
    // kernels (nodes and reference). On oneDNN's it was 9e-5 off: its convolution sums a batch's
    // weight gradient in blocks of samples, so two shards of 16 and one batch of 32 round
    // differently before the statistics ever meet (the per-shard references above hold within
    // 1e-5 on oneDNN too).
    const gradmesh::tasks::cpu::CpuKernels before = gradmesh::tasks::cpu::kernels();
    gradmesh::tasks::cpu::set_kernels(gradmesh::tasks::cpu::CpuKernels::kBuiltin);
    Job stack = resnet;
    stack.layers = {"conv2d:4:3:1:1", "batch_norm", "relu",
                    "flatten",        "dense:16",   "batch_norm",
                    "relu",           "dense:10",   "softmax_cross_entropy"};
    std::vector<std::string> builtin = args;
    builtin.insert(builtin.end(), {"--set", "compute.cpu_kernels=builtin"});
    check_equivalence("allreduce", 2, builtin, "", stack, Reduction::kUnionBatch);
    gradmesh::tasks::cpu::set_kernels(before);
  }
}
