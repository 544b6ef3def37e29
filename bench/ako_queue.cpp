// bench/ako_queue: the per-gradient cost of Ako's accumulation queue (Ako SoCC'16 Algorithm 1
// line 6, g*_t = g*_(t-1) + g_t - g_(t-p)), the network side's main CPU work per gradient.
//
// For the demo model's size (m = 269,322 floats) and several p, times one gradient per round
// (add, then advance: the paper's steady state) and prints ns per float and GB/s of the floats
// the algorithm must touch at least once (g read, slot written, g* read and written: 16 bytes per
// float). On shared cores the network side competes with the compute tasks for CPU and memory
// bandwidth, so this cost lowers the gradient rate gamma that eq. 3 plans with.
//
//   build/bench/bench_ako_queue [--floats M] [--rounds N]
// A benchmark, never a test: its figures go in README.md, not in assertions.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sync/ako/accumulation_queue.h"

int main(int argc, char** argv) {
  std::size_t floats = 269322;
  std::size_t rounds = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const auto value = static_cast<std::size_t>(std::strtoull(argv[i + 1], nullptr, 10));
    if (flag == "--floats") {
      floats = value;
    } else if (flag == "--rounds") {
      rounds = value;
    } else {
      std::fprintf(stderr, "usage: bench_ako_queue [--floats M] [--rounds N]\n");
      return 2;
    }
  }
  std::vector<float> g(floats);
  for (std::size_t i = 0; i < floats; ++i) g[i] = static_cast<float>(i % 17) * 0.01f;
  std::printf("%6s %14s %12s %10s\n", "p", "us/gradient", "ns/float", "GB/s");
  for (const std::size_t p : {1, 4, 16, 36, 64, 128}) {
    gradmesh::sync::ako::AccumulationQueue queue(floats, p);
    for (std::size_t r = 0; r < 2 * p; ++r) {  // warm-up: fill the ring once
      queue.add(g);
      queue.advance();
    }
    const auto start = std::chrono::steady_clock::now();
    float sink = 0;
    for (std::size_t r = 0; r < rounds; ++r) {
      queue.add(g);
      sink += queue.accumulated()[r % floats];
      queue.advance();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double per = s / static_cast<double>(rounds);
    std::printf("%6zu %14.1f %12.3f %10.2f%s\n", p, per * 1e6,
                per * 1e9 / static_cast<double>(floats),
                16.0 * static_cast<double>(floats) / per / 1e9, sink == 1e30f ? "!" : "");
  }
  return 0;
}
