#pragma once
// The state of the machine a benchmark runs in (issue 29 item 5). This project's hosts run in
// modes: memory-bound work (small GEMMs, im2col, pooling, the optimizer step) moves 1.5-2.5x
// between windows minutes apart while a large sgemm holds. A figure is comparable only with
// figures taken in the same mode, so every benchmark prints this beside its own.

#include <string>

namespace gradmesh::bench {

/// What measure_machine_state() read.
struct MachineState {
  /// STREAM's triad a[i] = b[i] + s c[i] over three arrays of 32 MiB (beyond any cache here):
  /// 12 bytes moved a float, the best of the passes, GB/s (1e9 bytes/s). One thread.
  double triad_gbps = 0;
  /// cpu::sgemm of 512 x 512 x 512 (compute-bound), the best pass, GFLOP/s, on the BLAS threads.
  double sgemm_gflops = 0;
  /// cpu::sgemm of 64 x 256 x 784 (the demo MLP's first layer at batch 64: small, memory- and
  /// latency-bound), the best pass, GFLOP/s.
  double small_gemm_gflops = 0;
  double load_average = 0;  ///< /proc/loadavg's 1-minute figure (0 where unreadable)
  /// The share of all cores' time the hypervisor took while the probes ran (/proc/stat's steal
  /// over its total; 0 where unreadable), in [0, 1].
  double steal = 0;
  unsigned cores = 0;  ///< std::thread::hardware_concurrency()
};

/// Measures the three rates for about `seconds` in all (a third each; at least one pass each).
/// Allocates 96 MiB for the triad and 3 MiB for the GEMMs, freed on return. Thread safety: any
/// thread; it loads the machine while it runs. Never throws beyond std::bad_alloc.
[[nodiscard]] MachineState measure_machine_state(double seconds = 0.3);

/// One line: "machine: triad 9.8 GB/s, sgemm 512^3 185.2 GFLOP/s, sgemm 64x256x784 41.0 GFLOP/s,
/// steal 0.0%, load 1.92 on 2 cores".
[[nodiscard]] std::string format_machine_state(const MachineState& state);

}  // namespace gradmesh::bench
