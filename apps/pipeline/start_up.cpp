#include "apps/pipeline/start_up.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "engine/error.h"
#include "net/tcp/frame_cipher.h"
#include "sync/compress/compression_profile.h"
#include "sync/plan_input.h"
#include "tasks/profile.h"
#include "topo/cost_model.h"
#include "topo/planner.h"
#include "topo/rate.h"

namespace gradmesh::app {

namespace {

using Clock = std::chrono::steady_clock;

/// Logs the compressor's measured times (the slowest node's), when start-up measured them: the
/// largest layer's encode and decode, and the 16-bit blocks'.
void log_codec(std::string_view method, const sync::JobMeasurements& m) {
  if (m.encode_seconds.empty()) return;
  std::size_t largest = 0;
  for (std::size_t l = 1; l < m.encode_seconds.size(); ++l) {
    if (m.encode_seconds[l] > m.encode_seconds[largest]) largest = l;
  }
  std::string half;
  if (m.half_encode_seconds_per_float > 0) {
    half =
        fmt::format("; 16-bit blocks {:.2f} ns/float to encode, {:.2f} to decode",
                    m.half_encode_seconds_per_float * 1e9, m.half_decode_seconds_per_float * 1e9);
  }
  spdlog::info(
      "compressor {} measured: layer {} (the costliest) {:.3f} ms to encode, {:.3f} ms to "
      "decode{} (slowest node)",
      method, largest, m.encode_seconds[largest] * 1e3, m.decode_seconds[largest] * 1e3, half);
}

}  // namespace

void check_writable_folder(const std::filesystem::path& dir, std::string_view what,
                           std::size_t rank) {
  const auto fail = [&](const std::string& why) {
    throw ConfigError(std::string(what) + " = \"" + dir.string() + "\": " + why +
                      " (checked at start-up, before any training)");
  };
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("cannot create the folder: " + ec.message());
  if (!std::filesystem::is_directory(dir, ec)) fail("not a folder");
  // One name per rank and process: nodes sharing the folder never touch each other's probe.
  const auto probe =
      dir / (".gradmesh-write-test-" + std::to_string(rank) + "-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(std::string("cannot write a file in it: ") + std::strerror(errno));
  const char byte = 0;
  const bool written = ::write(fd, &byte, 1) == 1 && ::fsync(fd) == 0;
  const int write_errno = errno;
  ::close(fd);
  std::filesystem::remove(probe, ec);
  if (!written) fail(std::string("cannot write a file in it: ") + std::strerror(write_errno));
}

topo::PeerList peer_list(const NodeOptions& options) {
  if (!options.peers.empty() && !options.peers_file.empty()) {
    throw ConfigError("give either --peers or --peers-file, not both");
  }
  if (!options.peers.empty()) return topo::PeerList::parse(options.peers);
  if (!options.peers_file.empty()) return topo::PeerList::from_file(options.peers_file);
  return topo::PeerList({topo::Peer{"127.0.0.1", 1}});  // a single local node: no socket is opened
}

tasks::cpu::CpuKernels cpu_kernels(const JobConfig& config) {
  const std::string& k = config.compute.cpu_kernels;
  if (k == "builtin" || (k == "auto" && !tasks::cpu::onednn_built())) {
    return tasks::cpu::CpuKernels::kBuiltin;
  }
  return tasks::cpu::CpuKernels::kOnednn;  // set_kernels refuses it in a build without oneDNN
}

int compute_threads(const JobConfig& config, const topo::PeerList& peers, std::size_t rank) {
  if (config.compute.threads > 0) return static_cast<int>(config.compute.threads);
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t local = std::max<std::size_t>(1, peers.count_on_host(peers[rank].host));
  return static_cast<int>(std::max<std::size_t>(1, cores / local));
}

namespace {

// "12.5 MB/s (100 Mbit/s) from 4194304 bytes in 336 ms", and what kind of figure it is.
std::string link_text(const sync::LinkReport& link) {
  std::string text = fmt::format("alpha {:.0f} us, B {} from a transfer of {} bytes in {:.1f} ms",
                                 link.alpha * 1e6, topo::format_rate(link.bandwidth), link.bytes,
                                 link.seconds * 1e3);
  if (link.steady) text += " (its steady part, before a stall at the receiver)";
  switch (link.kind) {
    case sync::LinkMeasure::kMeasured:
      break;
    case sync::LinkMeasure::kAtBound:
      text += " (the largest transfer: a fast link)";
      break;
    case sync::LinkMeasure::kEstimate:
      text +=
          " (an ESTIMATE: the probe's budget ran out before a transfer lasted long enough; "
          "set planner.bandwidth if it reads wrong)";
      break;
  }
  return text;
}

}  // namespace

sync::JobMeasurements measure_job(sync::LinkProbe& probe, tasks::Model& model, std::size_t batch,
                                  std::uint64_t seed, std::size_t nodes,
                                  const sync::CompressionOptions& compression, bool sealed,
                                  const std::optional<tasks::AdamOptions>& adam) {
  const auto start = Clock::now();
  sync::NodeProfile local = probe.measure_links();
  for (std::size_t peer = 0; peer < nodes; ++peer) {
    const sync::LinkReport& link = probe.report()[peer];
    if (link.transfers == 0) continue;  // this node
    const auto log =
        link.kind == sync::LinkMeasure::kEstimate ? spdlog::level::warn : spdlog::level::info;
    spdlog::log(log, "link to rank {} ({}): {}", peer, probe.peer_address(peer), link_text(link));
  }
  if (nodes > 1) spdlog::info("link probe took {:.2f} s", probe.took_seconds());
  // Every node profiles its compute at the same time, as they compute while training (nodes on
  // one host share its cores), and none while another still moves the link probe's bytes, which
  // on loopback takes CPU from the profile: measured apart, the GEMM rate of a 4-node job on 2
  // cores read 11 GFLOP/s in one run and 32 in the next, and the plan followed the noise.
  if (nodes > 1) probe.barrier(kComputeProfileBarrier);
  std::uint64_t part_barrier = kGemmProbeBarrier;  // one before the GEMM's, one before the step's
  static_assert(kLayerPassBarrier + tasks::kProfileWarmUpPasses + tasks::kProfileTimedPasses ==
                kGemmProbeBarrier);
  std::uint64_t pass_barrier = kLayerPassBarrier;  // one before each layer pass (lockstep)
  const tasks::ComputeProfile compute = tasks::profile_compute(
      model, batch, nodes, seed, adam,
      [&] {
        if (nodes > 1) probe.barrier(part_barrier++);
      },
      [&] {
        if (nodes > 1) probe.barrier(pass_barrier++);
      });
  local.forward_seconds = compute.times.forward_seconds;
  local.backward_seconds = compute.times.backward_seconds;
  local.backward_input_seconds = compute.times.backward_input_seconds;
  local.gemm_flops = compute.gemm_flops;
  local.step_seconds_per_float = compute.step_seconds_per_float;
  // The transport copies every byte on the host's cores: a compute on them loses that time (on a
  // GPU it does not). Per core of the compute's share: 4 nodes on 2 cores each get about half.
  if (!model.on_device() && compute.cpu_cores > 0)
    local.transport_seconds_per_byte = probe.transport_cpu_seconds_per_byte() / compute.cpu_cores;
  // The compressor's probe starts once every node's compute profile has ended, for the same
  // reason: a node that runs its codecs (top-k's encode alone is about 10 optimizer steps of
  // passes a layer) while another still times its GEMM and step takes memory bandwidth from that
  // profile, and the plan takes the slowest node's figures.
  if (nodes > 1 && sync::measures_compression(compression, model))
    probe.barrier(kCompressorProbeBarrier);
  if (auto codec = sync::measure_compression(compression, model, seed)) {
    local.encode_seconds = std::move(codec->encode_seconds);
    local.decode_seconds = std::move(codec->decode_seconds);
    local.half_encode_seconds_per_float = codec->half_encode_seconds_per_float;
    local.half_decode_seconds_per_float = codec->half_decode_seconds_per_float;
  }
  if (sealed) local.cipher_seconds_per_byte = net::auth::measure_cipher_seconds_per_byte();
  const auto profiles = nodes > 1 ? probe.exchange(local) : std::vector<sync::NodeProfile>{local};
  sync::JobMeasurements m = sync::combine(profiles);
  const topo::LinkCost link = topo::slowest_link(m.links);
  double tf = 0, tb = 0;
  for (double t : m.forward_seconds) tf += t;
  for (double t : m.backward_seconds) tb += t;
  spdlog::info(
      "measured in {:.2f} s: slowest link alpha {:.1f} us, B {}, o {:.1f} us; "
      "GEMM {:.1f} GFLOP/s; step {:.2f} ns/float; transport {:.2f} ns/byte; t_f {:.2f} ms, "
      "t_b {:.2f} ms (slowest node)",
      std::chrono::duration<double>(Clock::now() - start).count(), link.alpha * 1e6,
      nodes > 1 ? topo::format_rate(link.bandwidth) : std::string("-"), link.message_seconds * 1e6,
      m.gemm_flops / 1e9, m.step_seconds_per_float * 1e9, m.transport_seconds_per_byte * 1e9,
      tf * 1e3, tb * 1e3);
  log_codec(compression.method, m);
  if (m.cipher_seconds_per_byte > 0)
    spdlog::info(
        "frame cipher: {} sealed and opened per core (slowest node; in every B the probe "
        "measured, and added to planner.bandwidth's)",
        topo::format_rate(1.0 / m.cipher_seconds_per_byte));
  return m;
}

void log_summary(const sync::SyncStage& stage) {
  const auto summary = stage.summary();
  const auto find = [&](const char* key) {
    const auto it = summary.find(key);
    return it == summary.end() ? -1.0 : it->second;
  };
  if (find("predicted_iteration_seconds") >= 0) {
    spdlog::info(
        "plan: {:.0f} bytes sent per iteration, {:.2f} ms per iteration predicted, {:.0f} "
        "all-reduce bucket(s)",
        find("predicted_bytes_sent"), find("predicted_iteration_seconds") * 1e3, find("buckets"));
    if (find("predicted_transport_seconds") > 0)
      spdlog::info(
          "plan: the transport's work on the cores {:.2f} ms per iteration ({:.2f} ns a "
          "byte sent or received, beside the backward pass)",
          find("predicted_transport_seconds") * 1e3, find("transport_seconds_per_byte") * 1e9);
  }
  if (const auto text = compression_choice_text(summary)) spdlog::info("{}", *text);
}

std::optional<std::string> compression_choice_text(const std::map<std::string, double>& summary) {
  const auto with = summary.find("predicted_compressed_iteration_seconds");
  const auto without = summary.find("predicted_uncompressed_iteration_seconds");
  if (with == summary.end() || without == summary.end()) return std::nullopt;
  return fmt::format(
      "compression {}: {:.2f} ms per iteration predicted with it, {:.2f} ms without (planned when "
      "it saves {:.0f}% or more)",
      topo::compression_pays(with->second, without->second) ? "planned" : "left off",
      with->second * 1e3, without->second * 1e3, topo::kCompressionMargin * 100);
}

}  // namespace gradmesh::app
