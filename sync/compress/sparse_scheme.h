#pragma once
// A compressor with error feedback as a per-layer scheme (issue 28: top-k and random-k; issue 56:
// any registered compressor, by its traits; Stich, Cordonnier, Jaggi, "Sparsified SGD with
// Memory", NeurIPS'18, Alg. 1; the exchanges as BytePS's and GRACE's compressors run them): each
// node encodes its layer with error feedback; where the nodes' encodings differ in what they send
// (top-k's indices, sign's bits, qsgd's levels) they are all-gathered; where every node sends the
// same indices (random-k, drawn alike on every node) the values are summed by a ring all-reduce.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "sync/collective/all_gather.h"
#include "sync/collective/ring_allreduce.h"
#include "sync/compress/codec.h"
#include "sync/compress/device_codec.h"
#include "sync/compress/figures.h"
#include "sync/compress/options.h"
#include "sync/lane_router.h"
#include "sync/scheme.h"
#include "sync/sync_stage.h"

namespace gradmesh::sync {

/// The compressors' seed for model layer `layer`: the same on every node (random-k's values share
/// indices only so), distinct per layer; the codec draws iteration t's indices from it and t (and
/// qsgd its rounding, with the node's rank). Pure.
[[nodiscard]] std::uint64_t randomk_seed(std::size_t layer) noexcept;

/// One iteration, for each of its layers l (its n parameters' gradient g, the bias included),
/// after backward_l (WFBP):
///   sparse_encode_l  p = g + e; C(p) (top-k, random-k: k = ceil(ratio n) entries) and
///                    e = p - D(C(p)) (compress::Codec with error feedback; its iteration is the
///                    layer's count of steps, the same on every node); gathered: this node's
///                    encoding goes to every peer (collective::AllGather, one hop); shared
///                    indices (random-k): the k values start a ring all-reduce;
///   sparse_wait_l    until every node's encoding or the ring's sum is in;
///   sparse_apply_l   the layer's gradient buffer becomes sum over ranks 0..n-1, in rank order,
///                    of D(C_r(p_r)) (random-k: the ring's sum of the values, scattered), times
///                    1/n; the optimizer steps on it. Every replica holds the same bits.
/// The first sync.compression.start_iteration iterations (counted per layer, checkpointed) send
/// the whole layer through a ring all-reduce of its floats instead, as the allreduce scheme does.
/// At ratio 1 the update is the mean gradient: training equals the union batches' SGD.
///
/// Bytes per layer and iteration: gathered (n - 1)(encoding + h) (top-k: 8 k), random-k the ring
/// of 4 k bytes (sparse_model.h). Messages carry the layer's index as their priority. A peer's
/// encoding is checked on arrival (Compressor::check: its size; top-k's indices in range and
/// ascending; sign's and qsgd's padding bits); malformed ones are rejected through the router,
/// counted and logged, and never reach the sum.
///
/// Momentum (optimizer.momentum m > 0) with a sparsifier (top-k, random-k; a dense compressor such
/// as sign or qsgd steps the optimizer's momentum on the decoded mean, as any gradient): by
/// default DGC's momentum correction and momentum factor
/// masking (Lin et al., "Deep Gradient Compression", ICLR'18, sec. 3.2, eq. 5-6): each node keeps
/// its own velocity u of the layer (in the optimizer's velocity slice of the layer, which no
/// other step uses then, so the checkpoint holds it): u = m u + (g + wd w), the codec compresses
/// u with error feedback (its residual is DGC's accumulated v), u is zeroed where the encoding
/// sent (masking) — the codec's compress::MomentumCorrection wrapper around its error feedback
/// (momentum_correction.h; the scheme adds wd w into g first) — and the layer steps w -= lr * (the
/// mean of the decodings), without momentum or weight decay again. Error feedback with the
/// optimizer's momentum on the sparse mean instead (sync.compression.momentum_correction = false)
/// releases many iterations' gradient into the momentum at once: random-k at 1% with momentum 0.9
/// diverged so on the demo MLP (docs/compression.md), and diverged with the correction too (a
/// random-k coordinate goes out about every 1 / ratio iterations whatever its size): the
/// constructor warns for random-k with momentum, and for top-k with momentum and no correction. At
/// ratio 1 with the correction nothing is held back and u restarts every step: training equals the
/// union batches' SGD without momentum; without it, with momentum. Warm-up iterations step with the
/// optimizer's momentum, and the compressed ones start from that velocity.
///
/// On a device model (compute.device = "cuda") the encode of a compressor the backend's codec
/// kernels implement (DeviceCodec::supports: top-k, random-k) runs on the device
/// (compress::DeviceCodec: the same bytes and residual as the host's codec, bit for bit; only the
/// encoding is downloaded), as a task on the Model's thread, from the gradient backward left in
/// device memory; another compressor encodes the host copy on the host. With DGC's correction on
/// (momentum > 0) the velocity lives in the optimizer's host memory, so the host copy of the
/// gradient is encoded on the host as on a CPU model. Decoding and the step run on the host in both
/// cases (the host parameters are uploaded before the next forward, as for PS and all-reduce
/// layers).
///
/// Thread safety: as the Scheme interface. The codecs' residuals are owned by the layer's tasks
/// (ordered by the graph); save_state/load_state between iterations. Errors: ConfigError for a
/// ratio out of (0, 1]; a failed peer fails the layer's waiting tasks (fail_all).
class SparseScheme final : public Scheme {
 public:
  /// The scheme of `layers` (ascending) with the registered compressor `method` (ConfigError for
  /// an unknown or lossless one) and `options` (ratio, bits, start_iteration); routes its lane
  /// (gathered_lane: the compressor's name) on `router`.
  SparseScheme(const SyncContext& ctx, LaneRouter& router, const std::vector<std::size_t>& layers,
               std::string_view method, const CompressionOptions& options);

  void build(engine::Graph& graph, const IterationTasks& tasks) override;
  void fail_all(std::exception_ptr error) override;
  [[nodiscard]] double bytes_sent(std::size_t layer) const override;
  /// The compressor as plans name it: "top-k 1%", "random-k 1%", "sign", "qsgd 4-bit".
  [[nodiscard]] std::string describe(std::size_t layer) const override;
  /// Per layer over the compressed iterations since the last call: "compression_error.<l>", the
  /// mean of ||p - D(C(p))|| / ||p|| (p = g + e; 0: nothing lost, 1: everything),
  /// "residual_norm.<l>", the mean of ||e|| after the encode, and "residual_ratio.<l>", the mean
  /// of ||e|| / ||g||.
  void epoch_figures(std::map<std::string, double>& out) override;
  /// Per layer: the iterations done and the residual (bit for bit).
  void save_state(engine::StateWriter& out) override;
  void load_state(engine::StateReader& in) override;

 private:
  struct Layer {
    std::size_t index = 0;  // model layer
    std::size_t offset = 0;
    compress::Codec codec;
    std::vector<std::byte> sent[2];  // gathered: this node's encoding, by round parity
    std::vector<float> values;       // random-k: the k values, summed in place by the ring
    std::unique_ptr<collective::AllGather> gather;         // gathered
    std::unique_ptr<collective::RingAllReduce> ring;       // random-k
    std::unique_ptr<collective::RingAllReduce> ring_full;  // start_iteration > 0 only
    std::uint64_t done = 0;  // iterations applied (the codec's iteration; checkpointed)
    bool warm = false;       // this iteration goes uncompressed
    // Each collective counts its own rounds from 0 in this process.
    std::uint64_t full_rounds = 0, compressed_rounds = 0, round = 0;
    std::string name;                      // the layer's name, as the plan names it
    compress::CompressionFigures figures;  // since the last epoch_figures(), figures_mutex_
    // On a device model without DGC's correction: encodes there (holds the residual); `codec`
    // then only checks and decodes peers' bytes.
    std::unique_ptr<compress::DeviceCodec> device_codec;
    /// The codec that holds the residual (checkpoints): the device's, else the host's.
    engine::Checkpointable& residual_owner() {
      return device_codec ? static_cast<engine::Checkpointable&>(*device_codec) : codec;
    }
    Layer(std::string_view method, std::size_t floats, const compress::CompressorParams& params,
          bool host_residual)
        : codec(method, floats, params, host_residual) {}
  };
  void encode(Layer& layer);
  void await(Layer& layer, engine::TaskContext& task);
  void apply(Layer& layer);
  [[nodiscard]] const Layer* find(std::size_t layer) const noexcept;
  void on_message(std::size_t from, net::Message&& message);

  const SyncContext& ctx_;
  LaneRouter& router_;
  const compress::CompressorEntry& entry_;
  LaneId lane_;
  CompressionOptions options_;
  bool momentum_correction_ = false;  // options_.momentum_correction and momentum > 0
  bool on_device_ = false;            // encode with DeviceCodec (device model, no correction)
  std::vector<std::unique_ptr<Layer>> layers_;
  std::mutex figures_mutex_;  // the layers' figure sums: encode() against epoch_figures()
};

}  // namespace gradmesh::sync
