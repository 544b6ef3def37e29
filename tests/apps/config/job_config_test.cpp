// Tests for apps/config/job_config.cpp: parsing, checks, --set overrides, canonical text, hash.

#include "apps/config/job_config.h"

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "sync/ako/options.h"
#include "sync/poseidon/options.h"
#include "sync/ps/options.h"
#include "sync/sync_stage.h"

using gradmesh::ConfigError;
using gradmesh::app::JobConfig;
using gradmesh::app::load_job_config;
using gradmesh::app::parse_job_config;

namespace {

/// The options strategy ako reads from `c` (its own table, [sync.ako]).
gradmesh::sync::AkoOptions ako(const JobConfig& c) {
  gradmesh::sync::SyncOptions options;
  options.values = c.sync.options;
  return gradmesh::sync::ako_options(options);
}

constexpr const char* kMinimal = R"(
[model]
layers = ["dense:10", "softmax_cross_entropy"]
)";

JobConfig parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_job_config(text, "configs/x.toml", overrides);
}

/// Every dotted key, read back from the canonical text.
std::vector<std::string> keys_of(const JobConfig& config) {
  std::vector<std::string> keys;
  std::istringstream in(config.canonical_text());
  std::string line;
  std::string table;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      table = line.substr(1, line.size() - 2);
    } else {
      keys.push_back(table + "." + line.substr(0, line.find(' ')));
    }
  }
  return keys;
}

}  // namespace

TEST_CASE("a minimal config takes every default", "[config]") {
  const JobConfig c = parse(kMinimal);
  CHECK(c.job.name == "gradmesh-job");
  CHECK(c.job.seed == 42);
  CHECK(c.job.epochs == 1);
  CHECK_FALSE(c.job.max_iterations);
  CHECK(c.job.on_nonfinite == "stop");
  CHECK(c.data.dataset == "fashion-mnist");
  CHECK(c.data.path == "/usr/share/datasets/fashion-mnist");
  CHECK_FALSE(c.data.train_limit);
  CHECK(c.model.layers == std::vector<std::string>{"dense:10", "softmax_cross_entropy"});
  CHECK(c.optimizer.lr == 0.05);
  CHECK(c.optimizer.momentum == 0.9);
  CHECK(c.optimizer.weight_decay == 0.0);
  CHECK(c.optimizer.batch_size == 64);
  CHECK(c.sync.strategy == "auto");
  CHECK_FALSE(gradmesh::sync::ps_options(c.sync.options).chunk_bytes);
  CHECK(gradmesh::sync::poseidon_options(c.sync.options).sfb == "auto");
  CHECK_FALSE(ako(c).partitions);
  CHECK(ako(c).staleness == 0);
  CHECK_FALSE(ako(c).bandwidth);
  CHECK_FALSE(c.net.max_send_rate);
  CHECK(c.net.connect_timeout == 30.0);
  CHECK(c.net.max_frame_bytes == (std::size_t{1} << 30));
  CHECK(c.net.port == 29500);
  CHECK(c.compute.threads == 0);
}

TEST_CASE("every key is read from the file", "[config]") {
  const JobConfig c = parse(R"(
[job]
name = "fmnist-4"
seed = 7
epochs = 3
max_iterations = 100

[data]
dataset = "fashion-mnist"
path = "/tmp/fm"
train_limit = 512

[model]
layers = ["dense:256", "relu", "dense:10", "softmax_cross_entropy"]

[optimizer]
lr = 0.1
momentum = 0
weight_decay = 1e-4
batch_size = 32

[sync]
strategy = "ako"
ps.chunk_bytes = 4096
poseidon = { sfb = "never" }

[sync.ako]
partitions = 3
staleness = 2
bandwidth = "1gbit"

[net]
max_send_rate = "100mbit"
connect_timeout = 5
max_frame_bytes = 1048576

[compute]
threads = 2
)");
  CHECK(c.job.name == "fmnist-4");
  CHECK(c.job.seed == 7);
  CHECK(c.job.epochs == 3);
  CHECK(c.job.max_iterations == 100u);
  CHECK(c.data.path == "/tmp/fm");
  CHECK(c.data.train_limit == 512u);
  CHECK(c.model.layers.size() == 4);
  CHECK(c.optimizer.lr == 0.1);
  CHECK(c.optimizer.momentum == 0.0);
  CHECK(c.optimizer.weight_decay == 1e-4);
  CHECK(c.optimizer.batch_size == 32);
  CHECK(c.sync.strategy == "ako");
  CHECK(gradmesh::sync::ps_options(c.sync.options).chunk_bytes == 4096u);
  CHECK(gradmesh::sync::poseidon_options(c.sync.options).sfb == "never");
  CHECK(ako(c).partitions == 3u);
  CHECK(ako(c).staleness == 2);
  CHECK(ako(c).bandwidth == 125e6);
  CHECK(c.net.max_send_rate == 12.5e6);
  CHECK(c.net.connect_timeout == 5.0);
  CHECK(c.net.max_frame_bytes == 1048576);
  CHECK(c.compute.threads == 2);
}

TEST_CASE("the values auto, none and unlimited leave optional keys unset", "[config]") {
  const JobConfig c = parse(std::string(kMinimal) + R"(
[job]
max_iterations = "none"
[data]
train_limit = "none"
[sync.ps]
chunk_bytes = "auto"
[sync.ako]
partitions = "auto"
bandwidth = "auto"
[net]
max_send_rate = "unlimited"
)");
  CHECK(c == parse(kMinimal));
  CHECK(parse(kMinimal, {"net.max_send_rate=12500000"}).net.max_send_rate == 12.5e6);
}

TEST_CASE("every bad value is an error naming the key, the value and what was expected",
          "[config]") {
  struct Row {
    const char* toml;      // appended to a valid config
    const char* key;       // must appear in the message
    const char* value;     // must appear in the message
    const char* expected;  // must appear in the message
  };
  const Row rows[] = {
      {"[sync]\nstrategy = \"foo\"", "sync.strategy", "\"foo\"",
       "expected a strategy, one of none, ps, poseidon, ako, allreduce"},
      {"[optimizer]\nlr = -1", "optimizer.lr", "-1", "expected a number > 0"},
      {"[optimizer]\nlr = 0", "optimizer.lr", "0", "> 0"},
      {"[optimizer]\nlr = \"fast\"", "optimizer.lr", "\"fast\"", "a number > 0"},
      {"[optimizer]\nlr = nan", "optimizer.lr", "nan", "a number > 0"},
      {"[optimizer]\nmomentum = 1.0", "optimizer.momentum", "1.0", ">= 0 and < 1"},
      {"[optimizer]\nmomentum = -0.5", "optimizer.momentum", "-0.5", ">= 0 and < 1"},
      {"[optimizer]\nweight_decay = -0.5", "optimizer.weight_decay", "-0.5", ">= 0"},
      {"[optimizer]\nbatch_size = 0", "optimizer.batch_size", "0", "an integer >= 1"},
      {"[optimizer]\nbatch_size = 3.5", "optimizer.batch_size", "3.5", "an integer >= 1"},
      {"[job]\nepochs = 0", "job.epochs", "0", "an integer >= 1"},
      {"[job]\nmax_iterations = 0", "job.max_iterations", "0", "an integer >= 1"},
      {"[job]\nseed = -3", "job.seed", "-3", "an integer >= 0"},
      {"[job]\nname = \"\"", "job.name", "\"\"", "a non-empty string"},
      {"[job]\nname = 5", "job.name", "5", "a non-empty string"},
      {"[data]\ndataset = \"mnist\"", "data.dataset", "\"mnist\"",
       "\"fashion-mnist\" (the files under data.path) or \"synthetic\""},
      {"[data]\nshape = [3, 0, 4]", "data.shape", "[3, 0, 4]", "an array of 1 or 3 integers >= 1"},
      {"[data]\nshape = [4096, 4096, 2]", "data.shape", "[4096, 4096, 2]",
       "at most 16777216 floats"},
      {"[data]\nclasses = 1", "data.classes", "1", "an integer >= 2"},
      {"[data]\ntrain_limit = 0", "data.train_limit", "0", "an integer >= 1"},
      {"[net]\nconnect_timeout = 0", "net.connect_timeout", "0", "> 0"},
      {"[net]\nmax_send_rate = \"fast\"", "net.max_send_rate", "\"fast\"", "100mbit"},
      {"[net]\nmax_send_rate = -5", "net.max_send_rate", "-5", "a rate > 0"},
      {"[net]\nmax_frame_bytes = 0", "net.max_frame_bytes", "0", "an integer >= 1024"},
      {"[net]\nport = 70000", "net.port", "70000", "1..65535"},
      {"[sync.ps]\nchunk_bytes = 1022", "sync.ps.chunk_bytes", "1022", "multiple of 4"},
      {"[sync.ps]\nchunk_bytes = 0", "sync.ps.chunk_bytes", "0", "\"auto\" or an integer > 0"},
      {"[sync.poseidon]\nsfb = \"sometimes\"", "sync.poseidon.sfb", "\"sometimes\"",
       "one of auto, always, never"},
      {"[sync.ako]\npartitions = 0", "sync.ako.partitions", "0", "\"auto\" or an integer >= 1"},
      {"[sync.ako]\npartitions = \"many\"", "sync.ako.partitions", "\"many\"", "\"auto\""},
      {"[sync.ako]\nstaleness = -1", "sync.ako.staleness", "-1", "an integer >= 0"},
      {"[sync.ako]\nbandwidth = 0", "sync.ako.bandwidth", "0", "a rate > 0"},
      {"[compute]\nthreads = -1", "compute.threads", "-1", "an integer >= 0"},
      {"[compute]\ndevice = \"gpu\"", "compute.device", "\"gpu\"", "\"cpu\" or \"cuda\""},
      {"[sync]\nako = 3", "sync.ako", "3", "expected a table"},
  };
  for (const Row& row : rows) {
    INFO(row.toml);
    CHECK_THROWS_AS(parse(std::string(kMinimal) + row.toml), ConfigError);
    CHECK_THROWS_WITH(parse(std::string(kMinimal) + row.toml),
                      Catch::StartsWith("configs/x.toml: ") &&
                          Catch::Contains(std::string(row.key) + " = " + row.value) &&
                          Catch::Contains(row.expected));
  }
}

TEST_CASE("model.layers is required, non-empty and all strings", "[config]") {
  CHECK_THROWS_WITH(parse("[job]\nepochs = 2\n"),
                    Catch::Contains("model.layers is missing") && Catch::Contains("dense:256"));
  CHECK_THROWS_WITH(parse("[model]\nlayers = []\n"), Catch::Contains("model.layers = []"));
  CHECK_THROWS_WITH(parse("[model]\nlayers = [\"dense:10\", 3]\n"),
                    Catch::Contains("model.layers = [\"dense:10\", 3]"));
  CHECK_THROWS_WITH(parse("[model]\nlayers = \"dense:10\"\n"),
                    Catch::Contains("model.layers = \"dense:10\": expected a non-empty array"));
}

TEST_CASE("a bad layer spec is an error naming model.layers, the entry and what was expected",
          "[config]") {
  CHECK_THROWS_WITH(
      parse("[model]\nlayers = [\"dense:10\", \"rleu\", \"softmax_cross_entropy\"]\n"),
      Catch::Equals("configs/x.toml: model.layers[1]: expected 'dense:<units>', "
                    "'conv2d:<filters>:<kernel>[:<stride>[:<padding>]]', "
                    "'max_pool2d:<window>[:<stride>]', 'avg_pool2d:<window>[:<stride>]', "
                    "'global_avg_pool', 'batch_norm', 'flatten', 'dropout:<p>', 'relu', 'add', "
                    "'concat', 'basic_block:<channels>[:<stride>]', "
                    "'bottleneck_block:<channels>[:<stride>]' or "
                    "'softmax_cross_entropy', got 'rleu' (no layer kind 'rleu'; did you mean "
                    "'relu'?; a kind of one's own must be registered with "
                    "gradmesh::tasks::register_layer(\"rleu\", factory) before the config is "
                    "read (before the Pipeline is constructed)) (line 2)"));
  CHECK_THROWS_WITH(parse(kMinimal, {"model.layers=dense:0,softmax_cross_entropy"}),
                    Catch::Equals("--set: model.layers[0]: expected 'dense:<units>', got 'dense:0' "
                                  "(units must be >= 1)"));
}

TEST_CASE("unknown keys are errors that name the key", "[config]") {
  CHECK_THROWS_WITH(parse(std::string(kMinimal) + "[optimizer]\nlrr = 0.1\n"),
                    Catch::Contains("unknown key 'optimizer.lrr'") &&
                        Catch::Contains("did you mean 'optimizer.lr'?") &&
                        Catch::Contains("line 5"));
  CHECK_THROWS_WITH(parse(std::string(kMinimal) + "[fancy]\nx = 1\n"),
                    Catch::Contains("unknown key 'fancy'") && Catch::Contains("configs/README.md"));
  CHECK_THROWS_WITH(parse(std::string(kMinimal) + "[sync.ako]\nfoo = 1\n"),
                    Catch::Contains("unknown key 'sync.ako.foo'"));
  CHECK_THROWS_WITH(parse(std::string(kMinimal) + "[optimizer.lr]\nx = 1\n"),
                    Catch::Contains("optimizer.lr = { x = 1 }: expected a number > 0"));
  CHECK_THROWS_WITH(parse("top = 1\n" + std::string(kMinimal)),
                    Catch::Contains("unknown key 'top'"));
  CHECK_THROWS_WITH(parse(std::string(kMinimal) + "extra = 1\n"),
                    Catch::Contains("unknown key 'model.extra'"));
}

TEST_CASE("TOML syntax errors name the file, line and column", "[config]") {
  CHECK_THROWS_AS(parse("[model]\nlayers = [\"dense:10\"\n\n"), ConfigError);
  CHECK_THROWS_WITH(parse("[job]\nname = \n"),
                    Catch::StartsWith("configs/x.toml:2:") && Catch::Contains("TOML syntax error"));
  CHECK_THROWS_WITH(parse(std::string(kMinimal) + "[job]\nepochs = 1\nepochs = 2\n"),
                    Catch::StartsWith("configs/x.toml:6:"));
}

TEST_CASE("set overrides (--set) change any key", "[config][set]") {
  const JobConfig c = parse(kMinimal, {
                                          "optimizer.lr=0.01",
                                          "sync.strategy=ako",
                                          "sync.ako.partitions=\"auto\"",
                                          "sync.ako.staleness=3",
                                          "sync.ps.chunk_bytes=65536",
                                          "model.layers=[\"dense:10\"]",
                                          "net.max_send_rate=100mbit",
                                          "data.path=/tmp/data dir",
                                          "job.name=1e3",
                                          "job.max_iterations=20",
                                          "data.train_limit=256",
                                          "sync.poseidon.sfb=always",
                                      });
  CHECK(c.optimizer.lr == 0.01);
  CHECK(c.sync.strategy == "ako");
  CHECK_FALSE(ako(c).partitions);
  CHECK(ako(c).staleness == 3);
  CHECK(gradmesh::sync::ps_options(c.sync.options).chunk_bytes == 65536u);
  CHECK(c.model.layers == std::vector<std::string>{"dense:10"});
  CHECK(c.net.max_send_rate == 12.5e6);
  CHECK(c.data.path == "/tmp/data dir");
  CHECK(c.job.name == "1e3");  // a string key takes the text, not the TOML float
  CHECK(c.job.max_iterations == 20u);
  CHECK(c.data.train_limit == 256u);
  CHECK(gradmesh::sync::poseidon_options(c.sync.options).sfb == "always");
}

TEST_CASE("set overrides apply in order over the file and take bare layer lists", "[config][set]") {
  const std::string file = std::string(kMinimal) + "[optimizer]\nlr = 0.2\n";
  CHECK(parse(file).optimizer.lr == 0.2);
  CHECK(parse(file, {"optimizer.lr=0.3"}).optimizer.lr == 0.3);
  CHECK(parse(file, {"optimizer.lr=0.3", "optimizer.lr=0.4"}).optimizer.lr == 0.4);
  CHECK(parse(file, {" optimizer.lr =0.3"}).optimizer.lr == 0.3);
  CHECK(parse(file, {"model.layers=dense:32, relu,dense:10,softmax_cross_entropy"}).model.layers ==
        std::vector<std::string>{"dense:32", "relu", "dense:10", "softmax_cross_entropy"});
  // --set may supply a key the file lacks, even the required one
  CHECK(parse("", {"model.layers=[\"dense:10\"]"}).model.layers.size() == 1);
}

TEST_CASE("bad --set options are errors naming the key and value", "[config][set]") {
  CHECK_THROWS_WITH(parse(kMinimal, {"optimizer.lr"}),
                    Catch::Contains("--set optimizer.lr: expected KEY=VALUE"));
  CHECK_THROWS_WITH(parse(kMinimal, {"optimizer.lrr=0.1"}),
                    Catch::StartsWith("--set: unknown key 'optimizer.lrr'") &&
                        Catch::Contains("did you mean 'optimizer.lr'?"));
  CHECK_THROWS_WITH(parse(kMinimal, {"optimizer=1"}), Catch::Contains("'optimizer' is a table"));
  CHECK_THROWS_WITH(parse(kMinimal, {"sync.strategy=foo"}),
                    Catch::Equals("--set: sync.strategy = \"foo\": expected a strategy, one of "
                                  "none, ps, poseidon, ako, allreduce, local, auto"));
  CHECK_THROWS_WITH(parse(kMinimal, {"optimizer.lr=-1"}),
                    Catch::Equals("--set: optimizer.lr = -1: expected a number > 0"));
  CHECK_THROWS_WITH(parse(kMinimal, {"optimizer.lr=fast"}),
                    Catch::Contains("optimizer.lr = \"fast\""));
  CHECK_THROWS_WITH(parse(kMinimal, {"model.layers=dense:10,,relu"}),
                    Catch::Contains("model.layers = [\"dense:10\", \"\", \"relu\"]"));
  CHECK_THROWS_WITH(parse(kMinimal, {"=3"}), Catch::Contains("unknown key ''"));
}

TEST_CASE("load_job_config reads a file and names a missing one", "[config]") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("gradmesh_config_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "job.toml";
  {
    std::ofstream out(path);
    out << kMinimal << "[sync]\nstrategy = \"poseidon\"\n";
  }
  const JobConfig c = load_job_config(path, {"optimizer.batch_size=16"});
  CHECK(c.sync.strategy == "poseidon");
  CHECK(c.optimizer.batch_size == 16);
  {
    std::ofstream out(path, std::ios::app);
    out << "[net]\nconnect_timeout = -1\n";
  }
  CHECK_THROWS_WITH(load_job_config(path, {}),
                    Catch::StartsWith(path.string() + ": net.connect_timeout = -1"));
  const auto missing = dir / "nope.toml";
  CHECK_THROWS_AS(load_job_config(missing, {}), ConfigError);
  CHECK_THROWS_WITH(load_job_config(missing, {}),
                    Catch::Contains(missing.string()) && Catch::Contains("no such file"));
  CHECK_THROWS_WITH(load_job_config(dir, {}), Catch::Contains("is a directory"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("canonical text is sorted TOML that parses back to the same config", "[config]") {
  const JobConfig a = parse(kMinimal, {"net.max_send_rate=100mbit", "optimizer.lr=0.1",
                                       "job.name=tab\there \"quoted\"", "net.connect_timeout=30"});
  const std::string text = a.canonical_text();
  CHECK_THAT(text, Catch::Contains("[optimizer]\nalgorithm = \"sgd\"\nbatch_size = 64\nbeta1 = "
                                   "0.9\nbeta2 = 0.999\neps = 1e-08\nlr = 0.1\nmomentum = 0.9\n"));
  CHECK_THAT(text, Catch::Contains("connect_timeout = 30.0\n"));
  CHECK_THAT(text, Catch::Contains("max_send_rate = 12500000.0\n"));
  CHECK_THAT(text, Catch::Contains("[sync]\nstrategy = \"auto\"\n\n[sync.ako]\n"));
  CHECK_THAT(text, Catch::Contains("partitions = \"auto\""));
  CHECK(parse_job_config(text, "canonical", {}) == a);
  CHECK(parse_job_config(text, "canonical", {}).canonical_text() == text);

  const std::vector<std::string> keys = keys_of(a);
  CHECK(keys.size() == 65);
  CHECK(std::set<std::string>(keys.begin(), keys.end()).size() == keys.size());
}

TEST_CASE("hash is equal for equal configs and differs when any key differs", "[config][hash]") {
  const std::string file = std::string(kMinimal) + "[optimizer]\nlr = 0.05\n";
  const JobConfig base = parse(file);
  // Same effective config, written differently.
  CHECK(parse(kMinimal).hash() == base.hash());
  CHECK(parse(kMinimal, {"optimizer.lr=0.05", "sync.ps.chunk_bytes=auto"}).hash() == base.hash());
  CHECK(parse(std::string(kMinimal) + "[net]\nmax_send_rate = \"100mbit\"\n").hash() ==
        parse(kMinimal, {"net.max_send_rate=12.5MB/s"}).hash());

  // One override per key, each changing exactly that key.
  const std::vector<std::string> changes = {
      "compute.cpu_kernels=builtin",
      "compute.device=cuda",
      "compute.threads=3",
      "data.dataset=synthetic",
      "data.shape=[3, 8, 8]",  // (with data.dataset = "synthetic": see below)
      "data.classes=12",
      "data.path=/other",
      "data.train_limit=100",
      "data.test_limit=100",
      "data.normalize=standardize",
      "job.epochs=2",
      "job.max_iterations=10",
      "job.name=other",
      "job.seed=43",
      "model.layers=dense:10",
      "model.sync_batch_norm=true",
      "net.connect_timeout=31",
      "net.max_frame_bytes=1024",
      "net.max_send_rate=1gbit",
      "net.port=29501",
      "net.peer_timeout=5",
      "net.handshake_timeout=2",
      "net.min_nodes=2",
      "optimizer.batch_size=65",
      "optimizer.lr=0.051",
      "optimizer.momentum=0.8",
      "optimizer.weight_decay=0.001",
      "optimizer.weight_decay_exclude=true",
      "optimizer.algorithm=adamw",
      "optimizer.beta1=0.8",
      "optimizer.beta2=0.99",
      "optimizer.eps=1e-6",
      "optimizer.schedule=cosine",
      "sync.ako.bandwidth=1gbit",
      "sync.ako.partitions=2",
      "sync.ako.staleness=1",
      "sync.poseidon.sfb=never",
      "sync.poseidon.choose=bytes",
      "planner.probe=false",
      "planner.alpha=0.001",
      "planner.bandwidth=1gbit",
      "planner.gemm_flops=1e10",
      "planner.message_overhead=2e-5",
      "sync.ps.chunk_bytes=4096",
      "sync.strategy=ako",
      "security.secret_file=/run/secret",
      "sync.ako.final=fold",
      "sync.compression.method=powersgd",
      "sync.compression.rank=3",
      "sync.compression.ratio=0.5",
      "sync.compression.start_iteration=5",
      "sync.compression.momentum_correction=false",
      "sync.compression.bits=8",
      "sync.local.steps=7",
      "sync.local.outer=sgd",
      "sync.local.outer_lr=0.5",
      "sync.local.outer_momentum=0.5",
      "sync.local.overlap=eager",
      "sync.local.fragments=2",
      "sync.local.quorum=2",
      "checkpoint.dir=/tmp/ckpt",
      "checkpoint.every=10",
      "checkpoint.keep=3",
      "security.encrypt=false",
      "job.on_nonfinite=rollback",
  };
  std::set<std::uint64_t> hashes{base.hash()};
  std::set<std::string> keys_changed;
  for (const std::string& change : changes) {
    const std::string key = change.substr(0, change.find('='));
    // data.shape and data.classes describe synthetic data (check_data_keys refuses them for a
    // data set on disk): each changes that config's hash from data.dataset = "synthetic" alone.
    const bool synthetic = key == "data.shape" || key == "data.classes";
    const JobConfig changed =
        synthetic ? parse(file, {"data.dataset=synthetic", change}) : parse(file, {change});
    INFO(change);
    CHECK(changed != base);
    CHECK(hashes.insert(changed.hash()).second);
    keys_changed.insert(key);
  }
  // The list above covers every key of the schema.
  const std::vector<std::string> all = keys_of(base);
  CHECK(keys_changed == std::set<std::string>(all.begin(), all.end()));
}

TEST_CASE("the training fingerprint ignores what only says how long, where and how to connect",
          "[config][checkpoint]") {
  const std::string file = "[model]\nlayers = [\"dense:10\"]\n";
  const JobConfig base = parse(file);
  for (const std::string change :
       {"checkpoint.dir=/tmp/c", "checkpoint.every=5", "checkpoint.keep=4", "job.epochs=9",
        "job.max_iterations=3", "job.name=other", "net.connect_timeout=5", "net.port=29999",
        "security.secret_file=/s", "compute.threads=1", "data.test_limit=10",
        "job.on_nonfinite=off"}) {
    INFO(change);
    const JobConfig changed = parse(file, {change});
    CHECK(changed.training_text() == base.training_text());
    CHECK(changed.training_fingerprint() == base.training_fingerprint());
  }
  for (const std::string change : {"optimizer.lr=0.07", "job.seed=1", "sync.strategy=allreduce",
                                   "data.train_limit=100", "planner.probe=false"}) {
    INFO(change);
    const JobConfig changed = parse(file, {change});
    CHECK(changed.training_fingerprint() != base.training_fingerprint());
  }
  CHECK_THAT(base.training_text(), Catch::Contains("optimizer.lr = 0.05\n"));
}

TEST_CASE("configs/README.md documents every key", "[config][docs]") {
  std::ifstream in(std::string(GRADMESH_SOURCE_DIR) + "/configs/README.md");
  REQUIRE(in);
  std::stringstream readme;
  readme << in.rdbuf();
  for (const std::string& key : keys_of(parse(kMinimal))) {
    INFO(key);
    CHECK_THAT(readme.str(), Catch::Contains("`" + key + "`"));
  }
}

TEST_CASE("every config in configs/ and configs/sim/ loads", "[config]") {
  std::size_t loaded = 0;
  for (const char* dir : {"/configs", "/configs/sim"}) {
    for (const auto& entry :
         std::filesystem::directory_iterator(std::string(GRADMESH_SOURCE_DIR) + dir)) {
      if (entry.path().extension() != ".toml") continue;
      INFO(entry.path());
      const JobConfig c = load_job_config(entry.path(), {});
      CHECK(!c.job.name.empty());
      ++loaded;
    }
  }
  CHECK(loaded >= 10);  // 7 training configs, 3 of the seeds' networks (docs/scale.md)
}
