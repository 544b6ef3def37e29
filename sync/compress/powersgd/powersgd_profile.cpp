#include "sync/compress/powersgd/powersgd_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "sync/compress/powersgd/powersgd.h"
#include "tasks/cpu/cpu_backend.h"
#include "tasks/random.h"

namespace gradmesh::sync::compress {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

CodecProfile profile_powersgd(std::size_t rank, std::span<const MatrixShape> shapes,
                              double min_seconds, std::uint64_t seed) {
  GRADMESH_CHECK(
      std::isfinite(min_seconds) && min_seconds >= 0,
      "profile_powersgd: min_seconds must be finite and >= 0, got " + std::to_string(min_seconds));
  const auto measured_rows = [](const MatrixShape& shape) {
    return std::min(shape.rows, std::max<std::size_t>(1, kMaxProfiledFloats / shape.cols));
  };
  std::size_t largest = 0;
  for (const MatrixShape& shape : shapes) {
    if (shape.rows > 0 && shape.cols > 0)
      largest = std::max(largest, measured_rows(shape) * shape.cols);
  }
  tasks::SplitMix64 rng(seed);
  std::vector<float> gradient(largest);
  for (float& g : gradient) g = 2.0f * rng.next_float() - 1.0f;

  CodecProfile profile;
  profile.encode_seconds.assign(shapes.size(), 0.0);
  profile.decode_seconds.assign(shapes.size(), 0.0);
  // One BLAS thread while measuring: the passes' GEMMs are skinny (r columns) and bound by
  // reading M, and in training they run beside the backward pass, whose kernels hold OpenBLAS at
  // one thread while they run (tasks::cpu::CpuBackend::run_chunks). With the node's two, 4 nodes
  // on 2 cores read the 4096 x 4096 layer's steps 1 and 2 at 103 ms, where training took 47-54
  // ms; with one, 42 ms (2026-11-28, the large MLP).
  const tasks::cpu::SingleBlasThread one_blas_thread;
  std::map<std::pair<std::size_t, std::size_t>, std::pair<double, double>> by_shape;
  for (std::size_t l = 0; l < shapes.size(); ++l) {
    const MatrixShape& shape = shapes[l];
    if (shape.rows == 0 || shape.cols == 0) continue;
    const std::size_t rows = measured_rows(shape);
    auto it = by_shape.find({rows, shape.cols});
    if (it == by_shape.end()) {
      PowerSgd psgd(rows, shape.cols, rank, seed);
      std::vector<float> p(psgd.p_floats()), q(psgd.q_floats());
      const std::span<const float> g(gradient.data(), rows * shape.cols);
      double encode = 0, decode = 0;
      std::uint64_t rounds = 0;
      const auto round = [&] {
        const auto start = Clock::now();
        psgd.compute_p(g, p);
        psgd.compute_q(p, q);  // p: this node's own sum
        const auto encoded = Clock::now();
        psgd.decompress_each(p, q, 1, [](std::size_t, std::span<const float>) {});
        const auto end = Clock::now();
        encode += std::chrono::duration<double>(encoded - start).count();
        decode += std::chrono::duration<double>(end - encoded).count();
      };
      round();  // untimed: first touch of the buffers
      encode = decode = 0;
      do {
        round();
        ++rounds;
      } while (encode + decode < min_seconds);
      const double n = static_cast<double>(rounds);
      it = by_shape.emplace(std::pair{rows, shape.cols}, std::pair{encode / n, decode / n}).first;
    }
    const double scale = static_cast<double>(shape.rows) / static_cast<double>(rows);
    profile.encode_seconds[l] = it->second.first * scale;
    profile.decode_seconds[l] = it->second.second * scale;
  }
  return profile;
}

}  // namespace gradmesh::sync::compress
