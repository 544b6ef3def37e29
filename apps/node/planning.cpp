#include "apps/node/planning.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "apps/config/job_config.h"
#include "apps/node/device_profile.h"
#include "apps/node/links_file.h"
#include "apps/node/metrics.h"
#include "apps/pipeline/job_options.h"
#include "apps/pipeline/start_up.h"
#include "engine/error.h"
#include "engine/executor.h"
#include "sync/compress/compression_profile.h"
#include "sync/compress/options.h"
#include "sync/lane_router.h"
#include "sync/plan_input.h"
#include "sync/probe/link_probe.h"
#include "sync/sync_stage.h"
#include "tasks/cpu/cpu_backend.h"
#include "tasks/model.h"
#include "tasks/optim/optimizer.h"
#include "tasks/profile.h"
#include "topo/rate.h"

namespace gradmesh::app {

namespace {

/// A job as `plan` and `simulate` see it: its model (shapes only, on the CPU backend with the
/// kernels compute.cpu_kernels names), optimizer, sync options and this machine's measurements.
struct PlanningJob {
  JobConfig config;
  std::unique_ptr<tasks::Model> model;
  std::unique_ptr<tasks::Optimizer> optimizer;
  sync::SyncOptions sync;
  std::optional<sync::JobMeasurements> measured;
};

/// What load_planning_job() times on this machine.
enum class Timing {
  kConfig,  ///< as planner.probe says: kAll, or nothing
  kAll,     ///< every layer, the GEMM, the step and the compressor (a node's start-up profile)
  kRates,   ///< the GEMM, the step and the compressor: no layer runs (--device RATE)
  kNone,    ///< nothing (--device FILE)
};

/// Loads `path` with `overrides` and times what `timing` says for `profile_nodes` nodes (no
/// peers: links come from planner.alpha / planner.bandwidth / `bandwidth`, else the planner's
/// assumed rates). A model no layer of which runs is shapes-only (Model::shapes_only: the
/// parameters' memory alone), so that networks too large to train here (configs/sim/) plan too.
/// Throws ConfigError.
PlanningJob load_planning_job(const std::filesystem::path& path,
                              const std::vector<std::string>& overrides, std::size_t profile_nodes,
                              const std::optional<std::string>& bandwidth,
                              Timing timing = Timing::kConfig) {
  PlanningJob job{load_job_config(path, overrides), nullptr, nullptr, {}, std::nullopt};
  const JobConfig& config = job.config;
  check_data_keys(config);
  check_optimizer_keys(config);
  tasks::cpu::set_kernels(cpu_kernels(config));
  // The layers are timed on the node's threads where the config gives them (a node of n on a
  // host of c cores takes c / n when it does not: a process alone here, all of them).
  if (config.compute.threads > 0) tasks::cpu::set_threads(static_cast<int>(config.compute.threads));
  if (timing == Timing::kConfig) timing = config.planner.probe ? Timing::kAll : Timing::kNone;
  if (timing == Timing::kRates && !config.planner.probe) timing = Timing::kNone;
  job.model = std::make_unique<tasks::Model>(
      timing == Timing::kAll
          ? tasks::Model(layer_specs(config), input_shape(config), config.optimizer.batch_size,
                         config.job.seed)
          : tasks::Model::shapes_only(layer_specs(config), input_shape(config),
                                      config.optimizer.batch_size, config.job.seed));
  job.optimizer = std::make_unique<tasks::Optimizer>(
      sgd_options(config), job.model->parameter_count(), adam_options(config));
  if (config.optimizer.weight_decay_exclude) {
    job.optimizer->exempt_from_weight_decay(job.model->weight_decay_exempt());
  }
  job.sync = sync_options(config);
  if (bandwidth && !job.sync.planner.bandwidth) {
    job.sync.planner.bandwidth = topo::parse_rate(*bandwidth);
  }
  if (timing != Timing::kNone) {
    const tasks::ComputeProfile compute =
        timing == Timing::kAll
            ? tasks::profile_compute(*job.model, config.optimizer.batch_size, profile_nodes,
                                     config.job.seed, adam_options(config))
            : tasks::profile_rates(*job.model, config.optimizer.batch_size, profile_nodes,
                                   adam_options(config));
    sync::JobMeasurements& m = job.measured.emplace();
    m.forward_seconds = compute.times.forward_seconds;
    m.backward_seconds = compute.times.backward_seconds;
    m.backward_input_seconds = compute.times.backward_input_seconds;
    m.gemm_flops = compute.gemm_flops;
    m.step_seconds_per_float = compute.step_seconds_per_float;
    if (auto codec = sync::measure_compression(sync::compression_options(config.sync.options),
                                               *job.model, config.job.seed)) {
      m.encode_seconds = std::move(codec->encode_seconds);
      m.decode_seconds = std::move(codec->decode_seconds);
      m.half_encode_seconds_per_float = codec->half_encode_seconds_per_float;
      m.half_decode_seconds_per_float = codec->half_decode_seconds_per_float;
    }
    m.links.nodes = 0;  // not measured
  }
  return job;
}

/// `job`'s compute on a device of `rate` FLOP/s (simulate()'s docs).
void put_on_device(PlanningJob& job, double rate) {
  const sync::AssumedRates assumed;
  sync::JobMeasurements& m = job.measured ? *job.measured : job.measured.emplace();
  const double host_gemm = m.gemm_flops > 0 ? m.gemm_flops : assumed.gemm_flops;
  const double speedup = rate / host_gemm;
  const std::size_t layers = job.model->num_layers();
  m.forward_seconds.assign(layers, 0.0);
  m.backward_seconds.assign(layers, 0.0);
  m.backward_input_seconds.assign(layers, 0.0);
  for (std::size_t l = 0; l < layers; ++l) {
    const sync::LayerSeconds s =
        sync::layer_seconds(job.model->layer(l), l, job.config.optimizer.batch_size, rate);
    m.forward_seconds[l] = s.forward;
    m.backward_seconds[l] = s.backward;
    m.backward_input_seconds[l] = s.backward_input;
  }
  m.gemm_flops = rate;
  m.step_seconds_per_float =
      (m.step_seconds_per_float > 0 ? m.step_seconds_per_float : assumed.step_seconds_per_float) /
      speedup;
  for (double& t : m.encode_seconds) t /= speedup;
  for (double& t : m.decode_seconds) t /= speedup;
  m.half_encode_seconds_per_float /= speedup;
  m.half_decode_seconds_per_float /= speedup;
  m.links.nodes = 0;  // not measured
}

/// The SyncContext of rank 0 of `nodes` for `job`.
sync::SyncContext planning_context(PlanningJob& job, engine::Executor& executor,
                                   sync::LaneRouter& router, std::size_t nodes) {
  return sync::SyncContext{*job.model,
                           executor,
                           router,
                           0,
                           nodes,
                           job.config.optimizer.batch_size,
                           *job.optimizer,
                           job.sync,
                           0,
                           job.measured ? &*job.measured : nullptr};
}

/// Node counts 2, 4, ..., 1024.
std::vector<std::size_t> default_node_counts() {
  std::vector<std::size_t> counts;
  for (std::size_t n = 2; n <= 1024; n *= 2) counts.push_back(n);
  return counts;
}

/// "SFB 2, PS 1": how many layers with parameters each scheme of `plan` holds (all-reduce's
/// buckets, " b<i>", not told apart).
std::string scheme_counts(const std::vector<sync::LayerPlan>& plan) {
  static const std::regex bucket(R"( b\d+\b)");
  std::map<std::string, std::size_t> counts;
  for (const sync::LayerPlan& row : plan) {
    if (row.parameters > 0) ++counts[std::regex_replace(row.scheme, bucket, "")];
  }
  std::string text;
  for (const auto& [scheme, count] : counts) {
    text += (text.empty() ? "" : ", ") + scheme + " " + std::to_string(count);
  }
  return text;
}

/// The predicted seconds of one iteration in `summary` (a planned stage's
/// predicted_iteration_seconds; local's round over H), or nullopt where the strategy predicts
/// none.
std::optional<double> predicted_iteration(const std::map<std::string, double>& summary) {
  if (const auto it = summary.find("predicted_iteration_seconds"); it != summary.end()) {
    return it->second;
  }
  const auto t_c = summary.find("local_iteration_seconds");
  const auto u = summary.find("local_predicted_utilization");
  if (t_c != summary.end() && u != summary.end() && u->second > 0) return t_c->second / u->second;
  return std::nullopt;
}

/// Runs `body` (returning the exit status) for subcommand `name`, printing its errors to stderr:
/// a configuration error (naming the key) gives 2, any other 1.
template <class Body>
int run_subcommand(const char* name, Body&& body) {
  try {
    return body();
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "gradmesh-node %s: configuration error: %s\n", name, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gradmesh-node %s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace

double parse_device_rate(const std::string& text) {
  static const std::regex form(
      R"(\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kmgtpKMGTP]?)[fF][lL][oO][pP][sS]\s*:\s*([0-9]*\.?[0-9]+)\s*)");
  std::smatch m;
  const auto bad = [&](const std::string& why) {
    return ConfigError("--device " + text + ": " + why +
                       " (expected PEAK:EFFICIENCY, e.g. 6.1tflops:0.45: a rate with a unit "
                       "flops, gflops, tflops, ... and a share in (0, 1])");
  };
  if (!std::regex_match(text, m, form)) throw bad("not understood");
  double rate = std::stod(m[1].str());
  switch (std::tolower(static_cast<unsigned char>(m[2].str().empty() ? ' ' : m[2].str()[0]))) {
    case 'k':
      rate *= 1e3;
      break;
    case 'm':
      rate *= 1e6;
      break;
    case 'g':
      rate *= 1e9;
      break;
    case 't':
      rate *= 1e12;
      break;
    case 'p':
      rate *= 1e15;
      break;
    default:
      break;
  }
  const double efficiency = std::stod(m[3].str());
  if (!(rate > 0) || !std::isfinite(rate)) throw bad("the peak rate must be > 0");
  if (!(efficiency > 0 && efficiency <= 1)) throw bad("the efficiency must be in (0, 1]");
  return rate * efficiency;
}

int run_plan(const PlanOptions& options) {
  return run_subcommand("plan", [&] {
    if (options.nodes == 0) throw ConfigError("--nodes must be >= 1");
    PlanningJob job =
        load_planning_job(options.config, options.overrides, options.nodes, options.bandwidth);
    engine::Executor executor({1, 1});
    const std::string strategy = sync::strategy_for_nodes(job.config.sync.strategy, options.nodes);
    sync::LaneRouter router(nullptr, 0, options.nodes);
    auto stage =
        sync::make_sync_stage(strategy, planning_context(job, executor, router, options.nodes));
    const auto plan = stage->plan();
    std::printf(
        "plan for job '%s': strategy %s, %zu node(s), batch %zu per node, %zu parameters (rank "
        "0)\n",
        job.config.job.name.c_str(), strategy.c_str(), options.nodes,
        job.config.optimizer.batch_size, job.model->parameter_count());
    std::printf("%s", format_plan(plan).c_str());
    std::printf("%s", format_summary(stage->summary(), job.measured.has_value()).c_str());
    return 0;
  });
}

int run_profile(const ProfileOptions& options) {
  return run_subcommand("profile", [&] {
    if (options.nodes == 0) throw ConfigError("--nodes must be >= 1");
    PlanningJob job = load_planning_job(options.config, options.overrides, options.nodes,
                                        std::nullopt, Timing::kAll);
    DeviceProfile profile;
    profile.job = job.config.job.name;
    profile.device = job.model->backend().description();
    profile.compression = sync::compression_options(job.config.sync.options).method;
    profile.batch = job.config.optimizer.batch_size;
    profile.nodes = options.nodes;
    for (std::size_t l = 0; l < job.model->num_layers(); ++l) {
      profile.layer_names.push_back(job.model->layer_name(l));
      profile.layer_parameters.push_back(job.model->layer(l).parameter_count());
    }
    profile.measured = *job.measured;
    std::string command = "gradmesh-node profile --config " + options.config.string();
    for (const std::string& o : options.overrides) command += " --set " + o;
    command += " --nodes " + std::to_string(options.nodes) + " -o " + options.output.string();
    write_device_profile(profile, command, options.output);
    sync::LaneRouter router(nullptr, 0, 1);
    engine::Executor executor({1, 1});
    const double seconds =
        sync::compute_seconds(sync::planner_input(planning_context(job, executor, router, 1), {}));
    std::printf(
        "wrote %s: job '%s', %zu layers, batch %zu, one node's iteration %.3f ms (%.0f samples/s), "
        "GEMM %.1f GFLOP/s, on %s\n",
        options.output.string().c_str(), profile.job.c_str(), profile.layer_names.size(),
        profile.batch, seconds * 1e3, static_cast<double>(profile.batch) / seconds,
        profile.measured.gemm_flops / 1e9, profile.device.c_str());
    return 0;
  });
}

Simulation simulate(const SimulateOptions& options) {
  std::optional<SiteLinks> sites;
  if (options.links) {
    sites = read_links_file(*options.links);
    if (options.bandwidth) {
      throw ConfigError("--links and --bandwidth both give the links: give one");
    }
    const std::size_t hosts = sites->nodes();
    if (!options.nodes.empty() && options.nodes != std::vector<std::size_t>{hosts}) {
      throw ConfigError("--nodes: the links file " + options.links->string() + " has " +
                        std::to_string(hosts) + " hosts: leave --nodes out, or give " +
                        std::to_string(hosts));
    }
  }
  const std::vector<std::size_t> counts =
      sites ? std::vector<std::size_t>{sites->nodes()}
            : (options.nodes.empty() ? default_node_counts() : options.nodes);
  for (const std::size_t n : counts) {
    if (n < 2) throw ConfigError("--nodes: " + std::to_string(n) + " (each count must be >= 2)");
  }
  std::vector<std::string> overrides = options.overrides;
  if (options.compression) overrides.push_back("sync.compression.method=" + *options.compression);
  if (options.device && options.images_per_second) {
    throw ConfigError("--device and --images-per-second both give the device's rate: give one");
  }
  if (options.images_per_second && !(*options.images_per_second > 0)) {
    throw ConfigError("--images-per-second must be > 0");
  }
  // --device: a profile file when one is there, else PEAK:EFFICIENCY.
  std::optional<std::filesystem::path> profile_path;
  std::optional<double> device_rate;
  if (options.device) {
    std::error_code error;
    if (std::filesystem::is_regular_file(*options.device, error)) {
      profile_path = *options.device;
    } else {
      try {
        device_rate = parse_device_rate(*options.device);
      } catch (const ConfigError& e) {
        throw ConfigError(std::string(e.what()) + "; nor is it a device profile file (no file " +
                          *options.device + ")");
      }
    }
  }
  // A device's layers take their times from its profile or its rate: none run here (the step
  // and codec are scaled from this machine's with a rate).
  const Timing timing = profile_path                               ? Timing::kNone
                        : device_rate || options.images_per_second ? Timing::kRates
                                                                   : Timing::kConfig;
  PlanningJob job =
      load_planning_job(options.config, overrides, counts.front(), options.bandwidth, timing);
  std::string profile_text;
  if (profile_path) {
    DeviceProfile profile = read_device_profile(*profile_path);
    check_profile_fits(profile, *job.model, job.config.optimizer.batch_size, *profile_path);
    if (profile.compression != sync::compression_options(job.config.sync.options).method) {
      // Its codec times are another method's: the planner's assumed codec rates instead.
      profile.measured.encode_seconds.clear();
      profile.measured.decode_seconds.clear();
      profile.measured.half_encode_seconds_per_float = 0;
      profile.measured.half_decode_seconds_per_float = 0;
    }
    job.measured = std::move(profile.measured);
    profile_text = profile_path->string() + " (" + profile.device + ")";
  }
  engine::Executor executor({1, 1});
  const auto one_node_seconds = [&] {
    sync::LaneRouter router(nullptr, 0, 1);
    return sync::compute_seconds(
        sync::planner_input(planning_context(job, executor, router, 1), {}));
  };
  if (options.images_per_second) {
    constexpr double kReference = 1e12;  // FLOP/s; any rate: the time scales as 1 / R
    put_on_device(job, kReference);
    device_rate = kReference * one_node_seconds() * *options.images_per_second /
                  static_cast<double>(job.config.optimizer.batch_size);
  }
  if (device_rate) put_on_device(job, *device_rate);
  const bool measured_here = job.measured.has_value() && !device_rate && !profile_path;
  if (sites) {
    if (job.sync.planner.alpha || job.sync.planner.bandwidth) {
      throw ConfigError(std::string("--links gives every link: planner.") +
                        (job.sync.planner.alpha ? "alpha" : "bandwidth") +
                        " would override it; leave it out");
    }
    sync::JobMeasurements& m = job.measured ? *job.measured : job.measured.emplace();
    m.links = site_link_matrix(*sites, sync::AssumedRates{}.message_seconds);
  }
  const std::vector<std::string> strategies =
      options.strategies.empty() ? std::vector<std::string>{job.config.sync.strategy}
                                 : options.strategies;
  Simulation result;
  result.job = job.config.job.name;
  result.batch = job.config.optimizer.batch_size;
  result.parameters = job.model->parameter_count();
  result.measured = measured_here;
  if (sites) result.links = options.links->string() + ": " + describe(*sites);
  result.device_flops = device_rate.value_or(0.0);
  result.profile = profile_text;
  result.one_node_seconds = one_node_seconds();
  const double batch = static_cast<double>(result.batch);
  std::vector<SimulatedRun>& runs = result.runs;
  for (const std::string& name : strategies) {
    for (const std::size_t n : counts) {
      const std::string strategy = sync::strategy_for_nodes(name, n);
      if (!sync::strategy_traits(strategy).predicts_iteration) {
        throw ConfigError("simulate: strategy '" + strategy +
                          "' predicts no iteration time; simulate takes " +
                          sync::strategies_with(&sync::StrategyTraits::predicts_iteration));
      }
      sync::LaneRouter router(nullptr, 0, n);
      const auto start = std::chrono::steady_clock::now();
      auto stage = sync::make_sync_stage(strategy, planning_context(job, executor, router, n));
      const auto plan = stage->plan();
      const auto summary = stage->summary();
      const double plan_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::optional<double> iteration = predicted_iteration(summary);
      if (!iteration || !(*iteration > 0)) {
        throw ConfigError("simulate: strategy '" + strategy + "' predicted no iteration time");
      }
      SimulatedRun run;
      run.strategy = strategy;
      run.nodes = n;
      run.iteration_seconds = *iteration;
      run.samples_per_second = static_cast<double>(n) * batch / *iteration;
      run.efficiency = result.one_node_seconds / *iteration;
      const auto bytes = summary.find("predicted_bytes_sent");
      run.bytes_per_iteration = bytes != summary.end() ? bytes->second : 0.0;
      const auto crossing = summary.find("predicted_inter_site_bytes");
      run.inter_site_bytes = crossing != summary.end() ? crossing->second : 0.0;
      run.plan_seconds = plan_seconds;
      const auto steps = summary.find("local_steps");
      run.note = steps != summary.end()
                     ? "H=" + std::to_string(static_cast<std::size_t>(steps->second))
                     : scheme_counts(plan);
      runs.push_back(std::move(run));
    }
  }
  return result;
}

int run_simulate(const SimulateOptions& options) {
  return run_subcommand("simulate", [&] {
    const Simulation sim = simulate(options);
    if (options.json) {
      nlohmann::json rows = nlohmann::json::array();
      for (const SimulatedRun& r : sim.runs) {
        rows.push_back({{"strategy", r.strategy},
                        {"nodes", r.nodes},
                        {"iteration_seconds", r.iteration_seconds},
                        {"samples_per_second", r.samples_per_second},
                        {"efficiency", r.efficiency},
                        {"bytes_per_iteration", r.bytes_per_iteration},
                        {"inter_site_bytes_per_iteration", r.inter_site_bytes},
                        {"plan_seconds", r.plan_seconds},
                        {"plan", r.note}});
      }
      const nlohmann::json out = {{"job", sim.job},
                                  {"batch", sim.batch},
                                  {"parameters", sim.parameters},
                                  {"one_node_iteration_seconds", sim.one_node_seconds},
                                  {"measured_here", sim.measured},
                                  {"device_flops", sim.device_flops},
                                  {"device_profile", sim.profile},
                                  {"links", sim.links},
                                  {"runs", rows}};
      std::printf("%s\n", out.dump(2).c_str());
      return 0;
    }
    char device[96];
    std::snprintf(device, sizeof device, "a device reaching %.3g TFLOP/s", sim.device_flops / 1e12);
    std::printf(
        "simulate job '%s': batch %zu per node, %zu parameters; one node alone %.3f ms an "
        "iteration, %.0f samples/s (%s)\n",
        sim.job.c_str(), sim.batch, sim.parameters, sim.one_node_seconds * 1e3,
        static_cast<double>(sim.batch) / sim.one_node_seconds,
        sim.device_flops > 0   ? device
        : !sim.profile.empty() ? ("the profile " + sim.profile).c_str()
        : sim.measured         ? "layers, GEMM and step timed on this machine"
                               : "planner.* or assumed rates");
    const bool sites = !sim.links.empty();
    if (sites) std::printf("links %s\n", sim.links.c_str());
    std::printf("%-10s %6s %13s %12s %8s %14s%s %9s  %s\n", "strategy", "nodes", "iteration ms",
                "samples/s", "scaling", "bytes/it/node", sites ? "  inter-site/it" : "", "plan ms",
                "plan");
    for (const SimulatedRun& r : sim.runs) {
      char crossing[32] = "";
      if (sites) std::snprintf(crossing, sizeof crossing, " %15.0f", r.inter_site_bytes);
      std::printf("%-10s %6zu %13.3f %12.0f %7.1f%% %14.0f%s %9.2f  %s\n", r.strategy.c_str(),
                  r.nodes, r.iteration_seconds * 1e3, r.samples_per_second, 100.0 * r.efficiency,
                  r.bytes_per_iteration, crossing, r.plan_seconds * 1e3, r.note.c_str());
    }
    return 0;
  });
}

}  // namespace gradmesh::app
