#pragma once
// Sufficient-factor broadcasting for a set of layers (Poseidon ATC'17 sec. 2.1 and 3.2).

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sync/lane_router.h"
#include "sync/poseidon/sfb_layer.h"
#include "sync/scheme.h"
#include "sync/sync_stage.h"

namespace gradmesh::sync {

/// The scheme id of SFB with its factors in the segment format of compressor `method`
/// (sync.compression.method; issue 28, issue 56): "sfb_" + method ("sfb_fp16"). Pure.
[[nodiscard]] std::string sfb_segment_scheme_id(std::string_view method);

/// SFB with its factors in the segment format of registered compressor `method` as the planner
/// sees it: fits the layers SFB fits; cost topo::sfb_cost with the format's bytes a float and its
/// two segments' headers (FactorWire; fp16 and bf16: 2 bytes a float, an f32 scale a factor), the
/// conversions priced; lane sf_broadcast_half; skips the layer's own dW. Throws ConfigError for
/// an unregistered name, ContractError for a compressor without a segment format.
[[nodiscard]] topo::SchemeModel sfb_segment_scheme_model(std::string_view method);

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
/// `wire` a compressor's segment format (fp16, bf16): the factors cross the wire in it (SfbLayer;
/// scheme ids sfb_fp16, sfb_bf16 on the lane sf_broadcast_half, issue 28), half the bytes; every
/// node rebuilds from the decoded factors, its own included.
///
/// Errors and thread safety: as PsScheme (see SfbLayer for the buffers). The constructor throws
/// ContractError for a device model whose executor has more than one compute thread.
class SfbScheme final : public Scheme {
 public:
  /// Routes the sf_broadcast lane (`wire` null: floats) or sf_broadcast_half (a segment format,
  /// not owned, outliving the scheme) on `router`. `layers` must have sufficient factors.
  SfbScheme(const SyncContext& ctx, LaneRouter& router, const std::vector<std::size_t>& layers,
            const collective::SegmentCodec* wire = nullptr);

  void build(engine::Graph& graph, const IterationTasks& tasks) override;
  void fail_all(std::exception_ptr error) override;
  /// Wire bytes this rank sends for layer l per iteration: (n - 1) (SfbLayer::factor_bytes() +
  /// frame header).
  [[nodiscard]] double bytes_sent(std::size_t layer) const override;
  /// "SFB", or "SFB " and the segment format's name ("SFB fp16").
  [[nodiscard]] std::string describe(std::size_t layer) const override;

 private:
  void send_factors(std::size_t layer, std::uint64_t round);
  void apply_factors(std::size_t layer, std::uint64_t round);
  void on_factors(std::size_t from, net::Message&& message);

  const SyncContext& ctx_;
  LaneRouter& router_;
  const collective::SegmentCodec* wire_;  // null: floats
  LaneId lane_;
  std::vector<std::unique_ptr<SfbLayer>> layers_;  // by layer; null unless SFB
};

}  // namespace gradmesh::sync
