#pragma once
// Sufficient-factor broadcasting for a set of layers (Poseidon ATC'17 sec. 2.1 and 3.2).

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "sync/lane_router.h"
#include "sync/poseidon/sfb_layer.h"
#include "sync/scheme.h"
#include "sync/sync_stage.h"

namespace gradmesh::sync {

/// One iteration, for each of its layers l (a layer with sufficient factors, M x N weights):
///   sfb_send_l (network task, right after backward_l) broadcasts (U, V) to every peer;
///   sfb_wait_l (deferred) ends when all n pairs are in; sfb_apply_l rebuilds the mean dW with one
///   GEMM over the rank-ordered stack, derives db from U, and steps the node's optimizer locally.
/// The update equals single-process SGD on the union of the n batches; every replica computes the
/// same bits (the same stack in the same order). The layers' own dW GEMM is switched off
/// (Layer::set_parameter_gradients_enabled): the rebuilt gradient replaces it.
///
/// On a device model (Model::on_device) the update stays on the device. sfb_send_l and sfb_apply_l
/// run on the compute arena (they use the Model's device stream, which its one thread drives:
/// checked at construction; sends are non-blocking). sfb_apply_l uploads the stacked U, V
/// (n K (M + N) floats), rebuilds dW and db with the backend's GEMM into the Model's device
/// gradients, and steps the layer with Optimizer::step_on_device on the device velocity this
/// scheme registered (Optimizer::keep_on_device); the layer's device copy is then the current one
/// (Model::device_layer_parameters). The M x N gradient and weights never cross PCIe.
///
/// Errors and thread safety: as PsScheme (see SfbLayer for the buffers). The constructor throws
/// ContractError for a device model whose executor has more than one compute thread.
class SfbScheme final : public Scheme {
 public:
  /// Routes the sf_broadcast lane on `router`. `layers` must have sufficient factors.
  SfbScheme(const SyncContext& ctx, LaneRouter& router, const std::vector<std::size_t>& layers);

  void build(engine::Graph& graph, const IterationTasks& tasks) override;
  void fail_all(std::exception_ptr error) override;
  /// Wire bytes this rank sends for layer l per iteration: (n - 1) (K (M + N) floats + header).
  [[nodiscard]] double bytes_sent(std::size_t layer) const override;
  /// "SFB".
  [[nodiscard]] std::string describe(std::size_t layer) const override {
    (void)layer;
    return "SFB";
  }

 private:
  void send_factors(std::size_t layer, std::uint64_t round);
  void apply_factors(std::size_t layer, std::uint64_t round);
  void on_factors(std::size_t from, net::Message&& message);

  const SyncContext& ctx_;
  LaneRouter& router_;
  LaneId lane_;
  std::vector<std::unique_ptr<SfbLayer>> layers_;  // by layer; null unless SFB
};

}  // namespace gradmesh::sync
