#pragma once
// Start-up measurements of this node's compute, for the planner ("Measure, don't guess"): each
// layer's forward and backward time t_f^(l), t_b^(l) (MG-WFBP sec. III's per-layer times, the
// inputs of the WFBP timeline) and the GEMM rate that prices SFB's rebuild (Poseidon ATC'17
// sec. 3.2). The link measurements live in sync/probe/; topo/planner.h takes both as values.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "tasks/model.h"
#include "tasks/optim/adam.h"

namespace gradmesh::tasks {

/// Measured per-layer compute times, index = layer (as Model::layer(l)).
struct LayerTimes {
  std::vector<double> forward_seconds;   ///< t_f^(l), seconds, median over the timed passes
  std::vector<double> backward_seconds;  ///< t_b^(l), seconds, median over the timed passes
  /// t_b^(l) without the parameter gradients (Layer::set_parameter_gradients_enabled(false)):
  /// what the layer's backward takes when SFB rebuilds dW instead (Poseidon ATC'17 sec. 3.2),
  /// seconds, median over the timed passes. Equal to backward_seconds for a layer without
  /// sufficient factors (Layer::has_sufficient_factors() false or no parameters).
  std::vector<double> backward_input_seconds;
};

/// Times each layer's forward_layer and backward_layer on `batch` rows of seeded random inputs
/// (uniform in [-1, 1)) and labels (uniform over the classes), from `seed`: two untimed warm-up
/// passes, then `iterations` timed passes (forward 0..L-1, loss_backward, backward L-1..0), each
/// layer's call timed alone with std::chrono::steady_clock; a layer with sufficient factors is
/// timed a second time right after, with its parameter gradients off (the state it had is put
/// back). `before_pass`, when set, is called before each pass, the warm-up ones included (the
/// nodes of a job put a barrier there: see profile_compute()). Returns each layer's median. The
/// loss itself is not timed (it is no layer). A parameter-free layer (relu) may read as ~0 s.
///
/// Call it before training: it overwrites the model's input, activations and gradients
/// (parameters() and the layers' own state, such as batch normalization's running statistics,
/// are left bitwise unchanged; no optimizer step runs). The passes run in the
/// model's current mode, so in training mode each dropout layer draws (iterations + 2) masks
/// (Dropout::step() advances by as much, the same on every node). Thread safety: as Model,
/// one thread drives it; BLAS uses its process-wide thread count. Cost: (iterations + 2) passes,
/// the backward of layers with sufficient factors twice.
/// Throws gradmesh::ContractError if iterations == 0 or batch is outside [1, max_batch()], and
/// what `before_pass` throws.
[[nodiscard]] LayerTimes profile_layers(Model& model, std::size_t batch, std::size_t iterations,
                                        std::uint64_t seed,
                                        const std::function<void()>& before_pass = {});

/// The single-precision GEMM rate of this node: times cpu::sgemm of an m x k by k x n product
/// (row-major, no transposes, beta = 0), once untimed, then repeatedly until at least
/// `min_seconds` have passed (at least once), and returns 2 m n k reps / seconds, FLOP/s.
/// Allocates the three matrices (m k + k n + m n floats). Thread safety: any thread; BLAS uses its
/// process-wide thread count. Throws gradmesh::ContractError if m, n or k is 0 or min_seconds is
/// negative or not finite.
[[nodiscard]] double measure_gemm_flops(std::size_t m, std::size_t n, std::size_t k,
                                        double min_seconds);

/// The optimizer step's time per parameter on this node: times the node's update over `floats`
/// floats — sgd_update (momentum 0.9, weight decay 1e-4: every term of the update), or with
/// `adam` adam_update (its options, weight decay 1e-4: two moments and a square root a float) —
/// once untimed, then repeatedly until at least `min_seconds` have passed (at least once);
/// returns seconds / (reps x floats). It is a pass over three arrays (Adam: four), bound by
/// memory bandwidth once they leave the caches, as a layer's or a bucket's step is. Allocates 3
/// (4) x floats floats. Thread safety: any thread. Throws gradmesh::ContractError if floats is 0
/// or min_seconds is negative or not finite.
[[nodiscard]] double measure_step_seconds_per_float(
    std::size_t floats, double min_seconds, const std::optional<AdamOptions>& adam = std::nullopt);

/// What start-up measures of this node's compute: each layer's times, the GEMM rate and the
/// optimizer step's time.
struct ComputeProfile {
  LayerTimes times;
  double gemm_flops = 0;              ///< FLOP/s
  double step_seconds_per_float = 0;  ///< seconds/float
  /// The cores this node's compute got while profiled: the process's CPU time (std::clock) over
  /// the wall time of the whole profile, the barriers' waits left out, CPU seconds a second
  /// (compute.threads on an idle host; less when nodes share the host's cores, as they do while
  /// training). 0: not measured.
  double cpu_cores = 0;
};

/// How long profile_compute() times the GEMM and the optimizer step, seconds. Long enough that
/// one slice of the host's scheduling does not set the figure: 4 netns nodes on 2 cores read
/// the large MLP's GEMM at 52-93 GFLOP/s over 0.05 s, 46-72 over 0.25 s, in 21 runs each; the
/// unshaped plans' predictions then read 0.72-1.11 and 0.75-1.15 of the measured iteration, 18
/// and 20 of 21 within 20% (docs/compression.md, 2026-11-28).
inline constexpr double kGemmProbeSeconds = 0.25;
inline constexpr double kStepProbeSeconds = 0.1;

/// Passes of profile_compute()'s profile_layers(): untimed, then timed.
inline constexpr std::size_t kProfileWarmUpPasses = 2;
inline constexpr std::size_t kProfileTimedPasses = 5;

/// profile_layers() over kProfileTimedPasses timed passes, and measure_gemm_flops() for
/// kGemmProbeSeconds of the GEMM that prices SFB's rebuild on `nodes` nodes: M x N x nK for the
/// model's largest layer with sufficient factors (M outputs, N inputs; Poseidon ATC'17 sec. 3.2; 1
/// x 1 x nK if none), and measure_step_seconds_per_float() for kStepProbeSeconds over the largest
/// layer's parameters (at most 4 Mi floats), of Adam's update when `adam` is set (the node's
/// optimizer); and the CPU time the process got over them (ComputeProfile::cpu_cores). `between`,
/// when set, is called before the GEMM's and before the step's measurement (and left out of
/// cpu_cores): the nodes of a job put a barrier there, so that every node times each part while the
/// others run the same (on one host they share the cores and the memory bus). `before_pass` goes to
/// profile_layers(): the nodes of a job put a barrier before each pass, so that the passes run in
/// lockstep as training's iterations do (BSP). Without it, nodes that share a host's cores drift
/// apart: one that the scheduler favours ends its passes early and leaves the others the cores for
/// their last ones. 4 netns nodes on 2 cores (the CNN) read their own t_f + t_b at 78-217 ms, and
/// the job's figure (the per-layer max over nodes) at 110-210 from job to job, against a steady
/// iteration of 174-218; in lockstep the job's read 126-179, against 162-199 (docs/planner.md,
/// "The compute profile in lockstep"). Same errors and side effects as profile_layers(), and what
/// `between` and `before_pass` throw.
[[nodiscard]] ComputeProfile profile_compute(Model& model, std::size_t batch, std::size_t nodes,
                                             std::uint64_t seed,
                                             const std::optional<AdamOptions>& adam = std::nullopt,
                                             const std::function<void()>& between = {},
                                             const std::function<void()>& before_pass = {});

/// profile_compute()'s GEMM rate and optimizer step alone (no layer is run: a shapes-only model
/// will do, Model::shapes_only); times empty, cpu_cores 0. What `gradmesh-node simulate` needs to
/// scale a device's step from this machine's (--device RATE).
[[nodiscard]] ComputeProfile profile_rates(Model& model, std::size_t batch, std::size_t nodes,
                                           const std::optional<AdamOptions>& adam = std::nullopt);

/// The process's CPU time so far (std::clock: every thread, the kernel's work for the process
/// included), seconds; nullopt where the clock is not available. Differences of two readings
/// measure work over an interval (ComputeProfile::cpu_cores, the link probe's transport cost).
/// Thread-safe.
[[nodiscard]] std::optional<double> process_cpu_seconds() noexcept;

/// The median of `values` (the mean of the middle two for an even count); reorders them. Throws
/// gradmesh::ContractError when `values` is empty.
[[nodiscard]] double median(std::span<double> values);

}  // namespace gradmesh::tasks
