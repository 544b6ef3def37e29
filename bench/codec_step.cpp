// bench/codec_step: what each registered compressor costs a node's CPU per float (issues 28, 56),
// against the optimizer step over the same floats, the unit the planner prices conversions in
// (topo::ClusterCost::step_seconds_per_float). For each compressor, one layer of `floats` floats
// on n nodes: this node's encode with error feedback, then the n nodes' encodings decoded and
// summed (decode_add n times, as sync/compress/sparse_scheme.h does); then the segment formats of
// the rings and of SFB's factors ("fp16 blk": the scale, one encode, n decodes added). Seconds
// per call (median of `runs`) and the same in optimizer steps; the compressors' cost entries
// (CompressorEntry::cost) come from these figures.
//
//   build/bench/bench_codec_step [--floats N] [--nodes n] [--ratio R] [--bits B] [--runs K]
//                                [--device D]
//   (defaults 1048576 4 0.01 4 9; --device cuda adds the codecs the GPU's kernels implement as
//   DeviceCodec on the GPU:
//   the gradient and the sum in device memory, the encoding downloaded and each peer's uploaded,
//   as a CUDA node would; sync/compress/device_codec.h)
// A benchmark, never a test: its figures go in the docs, not in assertions.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/machine_state.h"
#include "sync/compress/codec.h"
#include "sync/compress/compressor.h"
#include "sync/compress/device_codec.h"
#include "tasks/make_backend.h"
#include "tasks/optim/optimizer.h"
#include "tasks/random.h"

namespace {

namespace compress = gradmesh::sync::compress;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t floats = 1 << 20, nodes = 4, runs = 9;
  std::int64_t bits = 4;
  double ratio = 0.01;
  std::string device;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--floats")
      floats = std::strtoull(value, nullptr, 10);
    else if (flag == "--nodes")
      nodes = std::strtoull(value, nullptr, 10);
    else if (flag == "--ratio")
      ratio = std::strtod(value, nullptr);
    else if (flag == "--bits")
      bits = std::strtoll(value, nullptr, 10);
    else if (flag == "--runs")
      runs = std::strtoull(value, nullptr, 10);
    else if (flag == "--device")
      device = value;
    else {
      std::fprintf(stderr,
                   "usage: bench_codec_step [--floats N] [--nodes n] [--ratio R] [--bits B] "
                   "[--runs K] [--device cuda]\n");
      return 2;
    }
  }
  if (floats == 0 || nodes == 0 || runs == 0 || !(ratio > 0 && ratio <= 1)) {
    std::fprintf(stderr, "bench_codec_step: --floats, --nodes, --runs > 0; --ratio in (0, 1]\n");
    return 2;
  }
  gradmesh::tasks::SplitMix64 rng(1);
  std::vector<float> gradient(floats), sum(floats);
  std::vector<float> weights(floats, 0.01f), scratch(floats);
  gradmesh::tasks::Optimizer optimizer({0.01f, 0.9f, 0.0f}, floats);
  std::vector<double> step_seconds;
  for (std::size_t run = 0; run < runs; ++run) {
    for (float& g : gradient) g = rng.next_float() - 0.5f;
    const std::span<const float> grads[1] = {gradient};
    const auto t0 = Clock::now();
    optimizer.step_sum(0, weights, grads, 1.0f, scratch);
    step_seconds.push_back(seconds_since(t0));
  }
  const double step = median(step_seconds);
  std::printf("%zu floats, %zu nodes, ratio %.3g, median of %zu\n", floats, nodes, ratio, runs);
  std::printf(
      "%s\n",
      gradmesh::bench::format_machine_state(gradmesh::bench::measure_machine_state()).c_str());
  std::printf("optimizer step %8.3f ms (%.2f ns/float)\n", step * 1e3,
              step * 1e9 / static_cast<double>(floats));
  std::printf("%-8s %12s %12s %14s %14s\n", "codec", "encode ms", "decode ms", "encode steps",
              "decode steps");
  const compress::CompressorParams params{.ratio = ratio, .seed = 11, .rank = 0, .bits = bits};
  for (const std::string& name : compress::compressor_names()) {
    if (compress::compressor_entry(name).traits.lossless) continue;
    compress::Codec codec(name, floats, params, true);
    std::vector<std::byte> wire(codec.encoded_bytes());
    std::vector<double> encode_seconds, decode_seconds;
    for (std::size_t run = 0; run < runs; ++run) {
      for (float& g : gradient) g = rng.next_float() - 0.5f;
      auto t0 = Clock::now();
      (void)codec.encode(gradient, wire, run);
      encode_seconds.push_back(seconds_since(t0));
      t0 = Clock::now();
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (std::size_t r = 0; r < nodes; ++r) codec.decode_add(wire, sum, run);
      decode_seconds.push_back(seconds_since(t0));
    }
    const double encode = median(encode_seconds), decode = median(decode_seconds);
    std::printf("%-8s %12.3f %12.3f %14.2f %14.2f\n", name.c_str(), encode * 1e3, decode * 1e3,
                encode / step, decode / step);
  }
  // The segment formats the rings and SFB's factors use (no error feedback): one encode, n
  // decodes added into a sum (a ring's reduce steps, SFB's rebuild inputs).
  for (const std::string& name : compress::compressor_names()) {
    const gradmesh::sync::collective::SegmentCodec* segment =
        compress::compressor_entry(name).segment;
    if (segment == nullptr) continue;
    std::vector<std::byte> wire(segment->encoded_bytes(floats));
    std::vector<double> encode_seconds, decode_seconds;
    for (std::size_t run = 0; run < runs; ++run) {
      for (float& g : gradient) g = rng.next_float() - 0.5f;
      auto t0 = Clock::now();
      segment->encode(gradient, wire.data(), {});
      encode_seconds.push_back(seconds_since(t0));
      t0 = Clock::now();
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (std::size_t r = 0; r < nodes; ++r) segment->decode_add(wire.data(), sum);
      decode_seconds.push_back(seconds_since(t0));
    }
    const double encode = median(encode_seconds), decode = median(decode_seconds);
    std::printf("%-8s %12.3f %12.3f %14.2f %14.2f\n", (name + " blk").c_str(), encode * 1e3,
                decode * 1e3, encode / step, decode / step);
  }
  if (device.empty()) return 0;
  // The same codecs on a device: encode from device memory (the download of the encoding
  // included), n decodes added into a device sum (each peer's upload included).
  const auto backend = gradmesh::tasks::make_backend(device);
  std::printf("device codec on %s\n", backend->description().c_str());
  auto gradient_device = backend->allocate<float>(floats);
  auto sum_device = backend->allocate<float>(floats);
  for (const std::string& name : compress::compressor_names()) {
    if (compress::compressor_entry(name).traits.lossless || !compress::DeviceCodec::supports(name))
      continue;
    compress::DeviceCodec codec(*backend, name, floats, params, true);
    std::vector<std::byte> wire(codec.encoded_bytes());
    std::vector<double> encode_seconds, decode_seconds;
    for (std::size_t run = 0; run < runs; ++run) {
      for (float& g : gradient) g = rng.next_float() - 0.5f;
      backend->copy_to_device(gradient_device.data(), gradient.data(), 4 * floats);
      backend->synchronize();
      auto t0 = Clock::now();
      (void)codec.encode(gradient_device.data(), wire, run);
      encode_seconds.push_back(seconds_since(t0));
      backend->fill(sum_device.data(), floats, 0.0f);
      backend->synchronize();
      t0 = Clock::now();
      for (std::size_t r = 0; r < nodes; ++r) codec.decode_add(wire, sum_device.data(), run);
      decode_seconds.push_back(seconds_since(t0));
    }
    const double encode = median(encode_seconds), decode = median(decode_seconds);
    std::printf("%-8s %12.3f %12.3f %14.2f %14.2f\n", (name + " dev").c_str(), encode * 1e3,
                decode * 1e3, encode / step, decode / step);
  }
  return 0;
}
