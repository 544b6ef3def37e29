#pragma once
// PowerSGD as a per-layer scheme (issue 28; Vogels, Karimireddy, Jaggi, NeurIPS'19, Alg. 1 with
// error feedback, as PyTorch's DDP hook runs it): a layer's weight gradient, viewed as a matrix,
// crosses the wire as two thin factors, each summed by a ring all-reduce.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sync/collective/ring_allreduce.h"
#include "sync/compress/figures.h"
#include "sync/compress/options.h"
#include "sync/compress/powersgd/powersgd.h"
#include "sync/lane_router.h"
#include "sync/scheme.h"
#include "sync/sync_stage.h"

namespace gradmesh::sync {

/// One iteration, for each of its layers l (weights W, a rows x cols matrix, and a bias of rows
/// floats), after backward_l (WFBP):
///   psgd_p_l    M = dW + e (the residual); P = M Q (rows x r, Q warm-started); the ring
///               all-reduce of [P | db] starts;
///   psgd_q_l    once it is summed: P_hat = orthonormalized sum; Q = M^T P_hat (cols x r); the
///               ring all-reduce of Q starts;
///   psgd_apply_l once it is summed: W steps on P_hat Q_mean^T (the mean gradient's rank-r
///               approximation, the same bits on every node), b on sum(db) / n; e = M - that.
/// The first sync.compression.start_iteration iterations (counted by each layer, saved in the
/// checkpoint state) send the whole layer through one ring all-reduce instead, as the allreduce
/// scheme does. Every replica holds the same bits after each step. Needs n >= 2 and the model's
/// gradients in host memory.
///
/// Bytes per layer and iteration: the two rings' (powersgd_cost): 4 (rows r + rows) and 4 cols r
/// bytes, instead of 4 (rows cols + rows).
///
/// Thread safety: as the Scheme interface. The residuals and Q are owned by the layer's tasks
/// (ordered by the graph); save_state/load_state between iterations. Errors: ConfigError when the
/// model lives on a device; a layer that is not a weight matrix with one bias a row:
/// ContractError; a failed peer fails the layer's waiting tasks (fail_all).
class PowerSgdScheme final : public Scheme {
 public:
  /// The scheme of `layers` (ascending) with `options` (rank, start_iteration); routes the
  /// powersgd lane on `router`.
  PowerSgdScheme(const SyncContext& ctx, LaneRouter& router, const std::vector<std::size_t>& layers,
                 const CompressionOptions& options);

  void build(engine::Graph& graph, const IterationTasks& tasks) override;
  void fail_all(std::exception_ptr error) override;
  [[nodiscard]] double bytes_sent(std::size_t layer) const override;
  /// "PowerSGD r<rank>".
  [[nodiscard]] std::string describe(std::size_t layer) const override;
  /// Per PowerSGD layer over the compressed iterations since the last call:
  /// "compression_error.<l>", the mean of ||M - P_hat P_hat^T M|| / ||M|| (M = g + e: what
  /// projecting this node's M on the rank-r subspace loses; 0 nothing, 1 everything),
  /// "residual_norm.<l>", the mean of ||e|| after the step, and "residual_ratio.<l>", the mean of
  /// ||e|| / ||g|| (how many iterations' worth of gradient the error feedback holds back).
  void epoch_figures(std::map<std::string, double>& out) override;
  /// Per layer: the iterations done, the residual and Q (bit for bit).
  void save_state(engine::StateWriter& out) override;
  void load_state(engine::StateReader& in) override;

 private:
  struct Layer {
    std::size_t index = 0;  // model layer
    std::size_t offset = 0;
    std::size_t rows = 0, cols = 0;
    compress::PowerSgd psgd;
    std::vector<float> p_send;  // [P | db], rows r + rows
    std::vector<float> p_hat;   // rows r
    std::vector<float> q_send;  // cols r
    std::unique_ptr<collective::RingAllReduce> ring_p, ring_q;
    std::unique_ptr<collective::RingAllReduce> ring_full;  // start_iteration > 0 only
    std::uint64_t done = 0;  // iterations applied (start_iteration counts them; checkpointed)
    bool warm = false;       // this iteration goes uncompressed
    // Each ring counts its own rounds from 0 in this process (a RingAllReduce takes rounds one
    // after another): the warm-up ring's, the factors' rings', and this iteration's.
    std::uint64_t full_rounds = 0, compressed_rounds = 0, round = 0;
    std::string name;                      // "<kind><index>", as the plan names it
    compress::CompressionFigures figures;  // since the last epoch_figures(), figures_mutex_
    Layer(std::size_t m, std::size_t n, std::size_t rank, std::uint64_t seed)
        : rows(m), cols(n), psgd(m, n, rank, seed) {}
  };
  void start_p(Layer& layer);
  void start_q(Layer& layer);
  void apply(Layer& layer);
  [[nodiscard]] const Layer* find(std::size_t layer) const noexcept;
  void on_message(std::size_t from, net::Message&& message);

  const SyncContext& ctx_;
  LaneRouter& router_;
  LaneId lane_;
  CompressionOptions options_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::mutex figures_mutex_;  // the layers' figure sums: apply() against epoch_figures()
};

}  // namespace gradmesh::sync
