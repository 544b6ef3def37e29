// bench/ako_queue: the per-gradient cost of Ako's accumulation queue (Ako SoCC'16 Algorithm 1
// line 6, g*_t = g*_(t-1) + g_t - g_(t-p)), the network side's main CPU work per gradient.
//
// For the demo model's size (m = 269,322 floats) and several p, times one gradient per round
// (add, then advance: the paper's steady state) and prints ns per float and GB/s of the floats
// the algorithm must touch at least once (g read, slot written, g* read and written: 16 bytes per
// float). On shared cores the network side competes with the compute tasks for CPU and memory
// bandwidth, so this cost lowers the gradient rate gamma that eq. 3 plans with.
//
// Then the per-round cost with 3 peers of copying their partitions out (AkoStage::send_round):
// equal links (every peer at p: ranges of g*) against links of different speeds (one peer's link
// at half the rate: it gets 2p partitions, the ring holds 2p rounds, and the two fast links'
// p-round windows are summed from the ring: AccumulationQueue::window_sum).
//
//   build/bench/bench_ako_queue [--floats M] [--rounds N]
// A benchmark, never a test: its figures go in README.md, not in assertions.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <span>

#include "sync/ako/accumulation_queue.h"
#include "sync/ako/range_partition.h"

namespace {

// Warm-up: every slot of the ring written, twice.
void fill_ring(gradmesh::sync::ako::AccumulationQueue& queue, const std::vector<float>& g) {
  for (std::size_t r = 0; r < 2 * queue.partitions(); ++r) {
    queue.add(g);
    queue.advance();
  }
}

}  // namespace

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
    fill_ring(queue, g);
    const auto start = std::chrono::steady_clock::now();
    float sink = 0;
    for (std::size_t r = 0; r < rounds; ++r) {
      queue.add(g);
      sink += queue.accumulated()[r % floats];
      queue.advance();
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double per = s / static_cast<double>(rounds);
    std::printf("%6zu %14.1f %12.3f %10.2f%s\n", p, per * 1e6,
                per * 1e9 / static_cast<double>(floats),
                16.0 * static_cast<double>(floats) / per / 1e9, sink == 1e30f ? "!" : "");
  }
  std::printf("\n3 peers, us per round (add + partitions copied out + advance)\n");
  std::printf("%6s %14s %22s %8s\n", "p", "equal links", "one link at half rate", "ratio");
  for (const std::size_t p : {4, 16, 64}) {
    double per_round[2] = {0, 0};
    for (const bool unequal : {false, true}) {
      const std::vector<std::size_t> links =
          unequal ? std::vector<std::size_t>{p, p, 2 * p} : std::vector<std::size_t>{p, p, p};
      const std::size_t ring = unequal ? 2 * p : p;
      gradmesh::sync::ako::AccumulationQueue queue(floats, ring);
      std::vector<gradmesh::sync::ako::RangePartition> parts;
      for (const std::size_t q : links) parts.emplace_back(floats, q);
      std::vector<float> out(parts[0].max_range_floats());
      fill_ring(queue, g);
      const auto start = std::chrono::steady_clock::now();
      float sink = 0;
      for (std::size_t r = 0; r < rounds; ++r) {
        queue.add(g);
        for (std::size_t peer = 0; peer < parts.size(); ++peer) {
          const auto range = parts[peer].range(parts[peer].range_for(peer, queue.round()));
          queue.window_sum(range, parts[peer].partitions(),
                           std::span<float>(out).first(range.size));
          sink += out[0];
        }
        queue.advance();
      }
      per_round[unequal ? 1 : 0] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
          static_cast<double>(rounds);
      if (sink == 1e30f) std::printf("!");
    }
    std::printf("%6zu %14.1f %22.1f %8.2f\n", p, per_round[0] * 1e6, per_round[1] * 1e6,
                per_round[1] / per_round[0]);
  }
  return 0;
}
