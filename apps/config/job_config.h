#pragma once
// The job config: one TOML file, the same on every node, plus `--set KEY=VALUE` overrides.
//
// Every key is documented in configs/README.md (DESIGN.md, "Contracts": keys that scripts and
// benchmarks rely on are never renamed). Unknown keys, wrong types and bad values are
// gradmesh::ConfigError naming the key, the value and what was expected.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sync/option_table.h"

namespace gradmesh::app {

/// Synthetic data's examples an epoch when data.train_limit is "none" (Fashion-MNIST's 60,000)
/// and its test set when data.test_limit is "none" (generated and held in memory: 1,000).
inline constexpr std::size_t kSyntheticTrainCount = 60'000;
inline constexpr std::size_t kSyntheticTestCount = 1'000;

/// The effective job config of one run: defaults, then the file, then the overrides.
/// A plain value type; fields are checked by parse_job_config(), not on assignment.
struct JobConfig {
  /// [job]: the run as a whole.
  struct Job {
    std::string name = "gradmesh-job";  ///< job.name: a label for logs and metrics.
    std::uint64_t seed = 42;            ///< job.seed: seeds initial weights and data shuffling.
    std::size_t epochs = 1;             ///< job.epochs: passes over the training set, >= 1.
    /// job.max_iterations: stop after this many iterations per node (>= 1); unset ("none"): no
    /// limit.
    std::optional<std::size_t> max_iterations;
    /// job.on_nonfinite: what a node does when the loss of an iteration or an update of the
    /// model is NaN or Inf (the non-finite guard, tasks/optim/non_finite.h): "stop" (every node
    /// stops with an error naming the iteration and the layer), "rollback" (with checkpoint.dir
    /// under a BSP strategy: back to the newest checkpoint once, then stop if it recurs) or
    /// "off" (no check: a diverged job trains on; for measuring the guard's cost).
    std::string on_nonfinite = "stop";
    friend bool operator==(const Job&, const Job&) = default;
  } job;

  /// [data]: the training and test set.
  struct Data {
    /// data.dataset: "fashion-mnist" (read from data.path) or "synthetic" (tasks::SyntheticTask:
    /// generated from job.seed, of data.shape and data.classes; an epoch of data.train_limit
    /// examples, default kSyntheticTrainCount, a test set of data.test_limit, default
    /// kSyntheticTestCount).
    std::string dataset = "fashion-mnist";
    /// data.shape: one synthetic sample's [features] or [channels, height, width].
    std::vector<std::size_t> shape{1, 28, 28};
    /// data.classes: the classes of synthetic data, >= 2.
    std::size_t classes = 10;
    /// data.path: the folder of the dataset's files.
    std::string path = "/usr/share/datasets/fashion-mnist";
    /// data.train_limit: use only the first N training images (>= 1; for tests); unset
    /// ("none"): all.
    std::optional<std::size_t> train_limit;
    /// data.test_limit: evaluate on only the first N test images (>= 1; for quick benchmarks);
    /// unset ("none"): all 10,000.
    std::optional<std::size_t> test_limit;
    /// data.normalize: "none" (pixels in [0, 1] as read) or "standardize" (every input
    /// x -> (x - mean) / stddev with the training set's one mean and standard deviation,
    /// tasks::fit_standardization).
    std::string normalize = "none";
    friend bool operator==(const Data&, const Data&) = default;
  } data;

  /// [model]: the network, a stack of layer specs such as
  /// ["dense:256", "relu", "dense:10", "softmax_cross_entropy"]. Required, non-empty; each spec
  /// is a non-empty string (the layer factory in tasks/ checks the specs themselves).
  struct Model {
    std::vector<std::string> layers;  ///< model.layers
    /// model.sync_batch_norm: batch normalization's training statistics over every node's batch
    /// (SyncBN, tasks::BatchNorm), not each node's own; needs a BSP strategy. Default off.
    bool sync_batch_norm = false;
    friend bool operator==(const Model&, const Model&) = default;
  } model;

  /// [optimizer]: SGD with momentum, run where the parameters are updated.
  struct Optimizer {
    /// optimizer.algorithm: "sgd" (with momentum), "adam" or "adamw" (tasks/optim/adam.h).
    std::string algorithm = "sgd";
    double beta1 = 0.9;         ///< optimizer.beta1: Adam's first-moment decay, in [0, 1).
    double beta2 = 0.999;       ///< optimizer.beta2: Adam's second-moment decay, in [0, 1).
    double eps = 1e-8;          ///< optimizer.eps: Adam's denominator term, > 0.
    double lr = 0.05;           ///< optimizer.lr: learning rate, > 0.
    double momentum = 0.9;      ///< optimizer.momentum: in [0, 1).
    double weight_decay = 0.0;  ///< optimizer.weight_decay: L2 coefficient, >= 0.
    /// optimizer.weight_decay_exclude: no weight decay on biases and batch normalization's
    /// gamma and beta (Model::weight_decay_exempt), only on the weights of dense and conv2d.
    bool weight_decay_exclude = false;
    /// optimizer.schedule: the learning rate over the job, "constant" (lr throughout) or
    /// "cosine" (annealed from lr to 0 over the job's iterations; tasks/optim/lr_schedule.h).
    std::string schedule = "constant";
    /// optimizer.batch_size: samples per iteration per node, >= 1.
    std::size_t batch_size = 64;
    friend bool operator==(const Optimizer&, const Optimizer&) = default;
  } optimizer;

  /// [sync]: the sync stage and its per-strategy options.
  struct Sync {
    std::string strategy =
        "auto";  ///< sync.strategy: none | ps | poseidon | ako | allreduce | auto.
    /// [sync.<table>]: the strategies' and schemes' own tables, by "<table>.<key>" (e.g.
    /// "ako.partitions"; sync/option_table.h): declared and read in each one's folder
    /// (sync::ako_options() and the like); keys not set read as their defaults.
    sync::OptionValues options;
    friend bool operator==(const Sync&, const Sync&) = default;
  } sync;

  /// [planner]: the planner's inputs, measured at start-up unless given here.
  struct Planner {
    bool probe = true;                 ///< planner.probe: measure alpha, B, t_f, t_b, GEMM rate
    std::optional<double> alpha;       ///< planner.alpha: seconds; unset ("auto"): measured
    std::optional<double> bandwidth;   ///< planner.bandwidth: B, bytes/s; unset: measured
    std::optional<double> gemm_flops;  ///< planner.gemm_flops: FLOP/s; unset: measured
    std::optional<double> message_overhead;  ///< planner.message_overhead: o, s; unset: measured
    friend bool operator==(const Planner&, const Planner&) = default;
  } planner;

  /// [net]: the transport.
  struct Net {
    /// net.max_send_rate: per-node send cap in bytes/s (> 0; a rate string or number); unset
    /// ("unlimited"): no cap.
    std::optional<double> max_send_rate;
    double connect_timeout = 30.0;  ///< net.connect_timeout: seconds, > 0.
    /// net.handshake_timeout: seconds an accepted connection may take to finish its handshake
    /// (net::TransportOptions::handshake_timeout_s), > 0.
    double handshake_timeout = 5.0;
    /// net.peer_timeout: seconds a connected peer may stay silent before it counts as failed
    /// (heartbeats keep idle links talking; net::TransportOptions::peer_timeout_s), >= 0; 0: off.
    double peer_timeout = 10.0;
    std::size_t max_frame_bytes = 1ull << 30;  ///< net.max_frame_bytes: largest frame, >= 1024.
    /// net.min_nodes: live nodes (this one included) a node needs to go on after peers failed
    /// (sync::Quorum); unset ("majority", the default): more than half of the nodes it ran with.
    std::optional<std::size_t> min_nodes;
    /// net.port: the TCP port every node listens on when the peer list comes from SLURM's node
    /// list (topo/launch_environment.h); unused with --peers, --peers-file or torchrun variables.
    std::uint16_t port = 29500;
    friend bool operator==(const Net&, const Net&) = default;
  } net;

  /// [security]: who may join. security.secret_file: the path of a file whose content is the job
  /// secret (apps/pipeline/job_secret.h reads it); "" = none. Only the path is ever printed.
  /// security.encrypt: with a secret, every frame after the authentication is encrypted and
  /// authenticated (net::TransportOptions::encrypt); every node must say the same.
  struct Security {
    std::string secret_file;
    bool encrypt = true;
    friend bool operator==(const Security&, const Security&) = default;
  } security;

  /// [compute]: the local executor.
  struct Compute {
    std::size_t threads = 0;  ///< compute.threads: BLAS and CPU-kernel threads; 0 = cores / nodes.
    /// compute.device: "cpu" (tasks/cpu/, OpenBLAS) or "cuda" (tasks/cuda/, cuBLAS; GPU 0).
    std::string device = "cpu";
    /// compute.cpu_kernels: "onednn" (oneDNN's sgemm), "builtin" (OpenBLAS's and gradmesh's own
    /// loops) or "auto" (oneDNN where the binary was built with it; tasks::cpu::set_kernels).
    std::string cpu_kernels = "auto";
    friend bool operator==(const Compute&, const Compute&) = default;
  } compute;

  /// [checkpoint]: exact checkpoints and --resume (README "Checkpoints and resume"; Poseidon
  /// arXiv'15 sec. 4.4).
  struct Checkpoint {
    /// checkpoint.dir: the folder each node writes node-<rank>/ckpt-<iteration>.gmckpt under;
    /// "" (the default): no checkpoints.
    std::string dir;
    /// checkpoint.every: iterations between checkpoints (>= 1); unset ("epoch"): at the end of
    /// every epoch (an epoch's worth, whatever its iteration count).
    std::optional<std::size_t> every;
    std::size_t keep =
        2;  ///< checkpoint.keep: how many of a node's newest checkpoints to keep, >= 1.
    friend bool operator==(const Checkpoint&, const Checkpoint&) = default;
  } checkpoint;

  /// Every key, as "key = value" lines sorted by key (the values as canonical_text() prints
  /// them); with `training_only`, the training_text() subset. The handshake carries the whole
  /// text so that a node refusing another's config names the keys that differ (net::Hello).
  [[nodiscard]] std::string key_text(bool training_only = false) const;

  /// The keys that shape training, as "key = value" lines sorted by key: every key but those that
  /// only say how long to run, where to write or how to connect (job.name, job.epochs,
  /// job.max_iterations, checkpoint.*, net.*, security.*, compute.threads, data.test_limit). A
  /// checkpoint records it; --resume refuses a config whose text differs, naming the keys.
  [[nodiscard]] std::string training_text() const;
  /// A 64-bit fingerprint of training_text() (as hash() of canonical_text()).
  [[nodiscard]] std::uint64_t training_fingerprint() const;

  /// A 64-bit fingerprint of the effective config: two zlib crc32s, of canonical_text() and of
  /// its reverse. Equal on every node iff their configs agree (up to crc collisions); compared
  /// at the handshake. Never throws beyond std::bad_alloc.
  [[nodiscard]] std::uint64_t hash() const;

  /// The effective config as TOML: every key (unset optional ones with their "none"/"auto"/
  /// "unlimited" spelling), tables and keys sorted by name, floats in their shortest round-trip
  /// form. Parsing it back gives an equal config. Printed by the node at start with --verbose;
  /// hash() is computed over it.
  [[nodiscard]] std::string canonical_text() const;

  /// Field-wise equality.
  friend bool operator==(const JobConfig&, const JobConfig&) = default;
};

/// Reads the TOML file at `path`, applies `overrides` and checks every key.
/// @param overrides "KEY=VALUE" strings from repeated --set options, applied in order (the
///        last one of a key wins); see parse_job_config().
/// @throws gradmesh::ConfigError if the file cannot be read (naming the path), or as
///         parse_job_config() does, its message prefixed "job config '<path>': " when it does not
///         name the file already (an override's error, a cross-key check).
[[nodiscard]] JobConfig load_job_config(const std::filesystem::path& path,
                                        const std::vector<std::string>& overrides);

/// Parses a job config from TOML text, applies `overrides` and checks every key.
///
/// Each override is "KEY=VALUE" with KEY a dotted key of the schema ("optimizer.lr"). VALUE is
/// parsed as a TOML value (`0.05`, `["dense:10"]`, `"auto"`); if that fails, or the key takes a
/// string and VALUE is another TOML type, VALUE is taken as a bare string (so
/// `sync.strategy=ako` works). model.layers also takes a bare comma-separated list.
///
/// @param source_name names the text in error messages (usually the file's path).
/// @throws gradmesh::ConfigError on a TOML syntax error (naming source, line and column), an
///         unknown key, a value of the wrong type or out of range (naming the key, the value and
///         what was expected), a missing model.layers, or an override without '='.
[[nodiscard]] JobConfig parse_job_config(std::string_view toml_text, std::string_view source_name,
                                         const std::vector<std::string>& overrides);

}  // namespace gradmesh::app
