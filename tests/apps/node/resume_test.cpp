// End-to-end tests of checkpoints and --resume (README "Checkpoints and resume"; Poseidon
// arXiv'15 sec. 4.4, exact restart): real gradmesh-node processes on 127.0.0.1. For the BSP
// strategies a job stopped and resumed with the same peers ends bitwise identical to one run
// without a stop.

#include <cstring>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "tests/apps/node/cluster.h"

using gradmesh::testing::Cluster;
using gradmesh::testing::read_file;
using gradmesh::testing::run_to_end;

namespace {

constexpr std::size_t kNodes = 2;
constexpr std::size_t kIterations = 30;  // 20 iterations per epoch: the job crosses an epoch

/// 640 training images over 2 nodes, batch 16: 20 iterations per epoch. A dropout layer, so a
/// random stream other than the data's must resume where it was.
std::string job_toml(const std::string& strategy) {
  std::ostringstream out;
  out << "[job]\nname = \"resume\"\nseed = 11\nepochs = 2\n"
      << "[data]\npath = \"/usr/share/datasets/fashion-mnist\"\ntrain_limit = 640\n"
      << "test_limit = 200\n"
      << "[model]\nlayers = [\"dense:32\", \"relu\", \"dropout:0.25\", \"dense:10\", "
         "\"softmax_cross_entropy\"]\n"
      << "[optimizer]\nlr = 0.05\nmomentum = 0.9\nweight_decay = 0.0001\nbatch_size = 16\n"
      << "[sync]\nstrategy = \"" << strategy << "\"\n"
      << "[planner]\nprobe = false\n"
      << "[net]\nconnect_timeout = 20.0\n";
  return out.str();
}

std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// Runs the job with `sets` (KEY=VALUE) and `extra` flags to its end; requires success.
void run_ok(Cluster& cluster, const std::vector<std::string>& sets,
            const std::vector<std::string>& extra = {}, std::size_t nodes = kNodes) {
  std::vector<std::string> args{"--save-parameters"};
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  cluster.start(args);
  const auto codes = cluster.wait(std::chrono::seconds(90));
  INFO(cluster.all_logs());
  REQUIRE(codes == std::vector<int>(nodes, 0));
}

/// The uninterrupted job, then the same job stopped at `stop` with checkpoints every `every`,
/// then resumed to the end; parameters compared byte for byte. `tear` corrupts rank 0's newest
/// checkpoint before the resume (a crash mid-write): the nodes then agree on the one before.
/// `job_sets` (KEY=VALUE) go to every run; with `expected_scheme`, the plan must put a layer on
/// a scheme whose plan name starts with it.
void check_stop_and_resume_is_bitwise(const std::string& strategy, std::size_t every,
                                      std::size_t stop, bool tear, std::uint64_t expected_resume,
                                      const std::vector<std::string>& job_sets = {},
                                      const std::string& expected_scheme = "") {
  const std::string toml = job_toml(strategy);
  const auto with_job_sets = [&job_sets](std::vector<std::string> sets) {
    sets.insert(sets.end(), job_sets.begin(), job_sets.end());
    return sets;
  };
  const std::string limit = "job.max_iterations=" + std::to_string(kIterations);
  Cluster whole("resume-whole-" + strategy, kNodes, toml);
  run_ok(whole, with_job_sets({limit}));
  if (!expected_scheme.empty()) {  // the plan runs the scheme under test
    std::size_t rows = 0;
    const auto metrics = whole.metrics(0);
    for (const auto& row : metrics["plan"]) {
      rows += row["scheme"].get<std::string>().starts_with(expected_scheme) ? 1 : 0;
    }
    CHECK(rows > 0);
  }

  Cluster first("resume-first-" + strategy, kNodes, toml);
  const std::string ckpt = (first.dir() / "ckpt").string();
  run_ok(first,
         with_job_sets({"job.max_iterations=" + std::to_string(stop), "checkpoint.dir=" + ckpt,
                        "checkpoint.every=" + std::to_string(every)}));
  for (std::size_t r = 0; r < kNodes; ++r) {
    INFO("rank " << r);
    CHECK(first.metrics(r)["checkpoints_written"].get<int>() >= 2);
    CHECK(first.metrics(r)["checkpoint_bytes"].get<std::uint64_t>() > 4 * 25'000);
  }
  if (tear) {
    char name[32];
    std::snprintf(name, sizeof name, "ckpt-%012zu.gmckpt", stop);
    const auto newest = std::filesystem::path(ckpt) / "node-0" / name;
    REQUIRE(std::filesystem::exists(newest));
    std::filesystem::resize_file(newest, std::filesystem::file_size(newest) / 2);
  }

  Cluster second("resume-second-" + strategy, kNodes, toml);
  run_ok(
      second,
      with_job_sets({limit, "checkpoint.dir=" + ckpt, "checkpoint.every=" + std::to_string(every)}),
      {"--resume", ckpt});
  INFO(second.all_logs());
  for (std::size_t r = 0; r < kNodes; ++r) {
    INFO("rank " << r);
    CHECK_THAT(second.log_text(r),
               Catch::Contains("resumed from iteration " + std::to_string(expected_resume)));
    CHECK(second.metrics(r)["resumed_from_iteration"].get<std::uint64_t>() == expected_resume);
    CHECK(second.metrics(r)["iterations"].get<std::uint64_t>() == kIterations - expected_resume);
    const std::string resumed =
        file_bytes(second.dir() / ("parameters-" + std::to_string(r) + ".f32"));
    const std::string uninterrupted =
        file_bytes(whole.dir() / ("parameters-" + std::to_string(r) + ".f32"));
    REQUIRE(uninterrupted.size() > 0);
    CHECK(resumed.size() == uninterrupted.size());
    CHECK(resumed == uninterrupted);  // bitwise
  }
  if (tear) {
    CHECK_THAT(second.log_text(0), Catch::Contains("skipping a checkpoint that does not verify") &&
                                       Catch::Contains("torn"));
  }
}

}  // namespace

TEST_CASE("ps: stopped mid-epoch and resumed equals the uninterrupted run bitwise",
          "[e2e][resume][ps]") {
  check_stop_and_resume_is_bitwise("ps", 6, 25, /*tear=*/false, 25);
}

TEST_CASE("poseidon: a torn newest checkpoint is skipped and the previous one resumes bitwise",
          "[e2e][resume][poseidon]") {
  // Checkpoints at 6, 12, 18, 24 and 25 (the end); keep 2: 24 and 25. Rank 0's 25 is torn, so
  // both nodes resume from 24, the newest they share.
  check_stop_and_resume_is_bitwise("poseidon", 6, 25, /*tear=*/true, 24);
}

TEST_CASE("allreduce: stopped at an epoch's end and resumed equals the uninterrupted run bitwise",
          "[e2e][resume][allreduce]") {
  check_stop_and_resume_is_bitwise("allreduce", 5, 20, /*tear=*/false, 20);
}

TEST_CASE(
    "auto with PowerSGD: stopped mid-epoch and resumed equals the uninterrupted run bitwise, "
    "residuals and warm starts restored",
    "[e2e][resume][compression]") {
  // planner.bandwidth = 1mbit: the planner puts the dense layers on PowerSGD (rank 2), whose
  // error-feedback residuals and warm-start Q the checkpoint must carry for the resumed run to
  // match.
  check_stop_and_resume_is_bitwise(
      "auto", 6, 15, /*tear=*/false, 15,
      {"sync.compression.method=powersgd", "sync.compression.rank=2", "planner.bandwidth=1mbit"},
      "PowerSGD");
}

TEST_CASE(
    "auto with top-k: stopped mid-epoch and resumed equals the uninterrupted run bitwise, "
    "residuals restored",
    "[e2e][resume][compression]") {
  // planner.bandwidth = 1mbit: the planner sparsifies the dense layers (5%), whose error-feedback
  // residuals and step counts the checkpoint must carry for the resumed run to match.
  check_stop_and_resume_is_bitwise(
      "auto", 6, 15, /*tear=*/false, 15,
      {"sync.compression.method=topk", "sync.compression.ratio=0.05", "planner.bandwidth=1mbit"},
      "top-k");
}

TEST_CASE(
    "a checkpoint written by 3 nodes resumes on 2 and on 4: the replica whole, the KV "
    "chunks re-sharded",
    "[e2e][resume][resplit]") {
  // ps on 3 nodes: the KV chunks (and their velocities) are spread over 3 owners.
  const std::string toml = job_toml("ps");
  Cluster first("resplit-first", 3, toml);
  const std::string ckpt = (first.dir() / "ckpt").string();
  run_ok(first, {"job.max_iterations=10", "checkpoint.dir=" + ckpt, "checkpoint.every=5"}, {}, 3);
  const std::string stopped = file_bytes(first.dir() / "parameters-0.f32");
  REQUIRE(stopped.size() > 0);
  for (const std::size_t nodes : {std::size_t{2}, std::size_t{4}}) {
    INFO(nodes << " nodes");
    // To the end of the 2 epochs: the iteration it resumed from is the same fraction of epoch 0.
    Cluster resumed("resplit-" + std::to_string(nodes), nodes, toml);
    run_ok(resumed, {}, {"--resume", ckpt}, nodes);
    const std::uint64_t start = resumed.metrics(0)["resumed_from_iteration"].get<std::uint64_t>();
    // 2 epochs in all: the job's iterations per epoch.
    const std::uint64_t per_epoch =
        (start + resumed.metrics(0)["iterations"].get<std::uint64_t>()) / 2;
    CHECK(start > 0);
    CHECK(start < per_epoch);  // 10 of the 3-node job's 13 per epoch: still epoch 0
    CHECK_THAT(resumed.log_text(0), Catch::Contains("the 3-node job's iteration 10 (13 per epoch) "
                                                    "is this job's iteration " +
                                                    std::to_string(start)));
    const std::string replica0 = file_bytes(resumed.dir() / "parameters-0.f32");
    for (std::size_t r = 0; r < nodes; ++r) {
      INFO("rank " << r);
      const auto m = resumed.metrics(r);
      CHECK(m["resumed_from_iteration"] == start);
      CHECK(m["iterations"].get<std::uint64_t>() + start == 2 * per_epoch);
      CHECK(m["rejected_messages"] == 0);
      CHECK(m["test_accuracy"].get<double>() > 0.5);
      CHECK(file_bytes(resumed.dir() / ("parameters-" + std::to_string(r) + ".f32")) == replica0);
      CHECK_THAT(resumed.log_text(r),
                 Catch::Contains("the 3-node job's checkpoints of its iteration 10 re-split over " +
                                 std::to_string(nodes) + " nodes"));
    }
    // Resumed and stopped at once: every node holds the 3-node job's replica, bit for bit.
    Cluster none("resplit-none-" + std::to_string(nodes), nodes, toml);
    run_ok(none, {"job.max_iterations=" + std::to_string(start)}, {"--resume", ckpt}, nodes);
    for (std::size_t r = 0; r < nodes; ++r) {
      INFO("rank " << r);
      CHECK(none.metrics(r)["iterations"] == 0);
      CHECK(file_bytes(none.dir() / ("parameters-" + std::to_string(r) + ".f32")) == stopped);
    }
  }
}

TEST_CASE("resume fails clearly for a missing folder or another config or node count",
          "[e2e][resume][errors]") {
  const std::string toml = job_toml("ps");
  Cluster first("resume-errors-first", kNodes, toml);
  const std::string ckpt = (first.dir() / "ckpt").string();
  run_ok(first, {"job.max_iterations=4", "checkpoint.dir=" + ckpt, "checkpoint.every=2"});

  SECTION("a folder with no checkpoints") {
    Cluster c("resume-missing", kNodes, toml);
    c.start({"--resume", (first.dir() / "nothing-here").string()});
    const auto codes = c.wait(std::chrono::seconds(60));
    INFO(c.all_logs());
    CHECK(codes == std::vector<int>{1, 1});
    CHECK_THAT(c.log_text(0), Catch::Contains("no checkpoint iteration is valid on every node") &&
                                  Catch::Contains("rank 0: none; rank 1: none") &&
                                  Catch::Contains("nothing-here/node-0"));
  }
  SECTION("another learning rate") {
    Cluster c("resume-config", kNodes, toml);
    c.start({"--resume", ckpt, "--set", "optimizer.lr=0.07"});
    const auto codes = c.wait(std::chrono::seconds(60));
    INFO(c.all_logs());
    CHECK(codes == std::vector<int>{2, 2});
    CHECK_THAT(c.log_text(0),
               Catch::Contains("written under another config: optimizer.lr = 0.05 in the "
                               "checkpoint, 0.07 now"));
  }
  SECTION("another node count without every old node's folder") {
    std::filesystem::remove_all(std::filesystem::path(ckpt) / "node-1");
    Cluster c("resume-count", 3, toml);
    c.start({"--resume", ckpt});
    const auto codes = c.wait(std::chrono::seconds(60));
    INFO(c.all_logs());
    CHECK(codes == std::vector<int>{1, 1, 1});
    CHECK_THAT(c.log_text(0), Catch::Contains("no checkpoint iteration is valid on every node") &&
                                  Catch::Contains("needs every one of its node-<rank> folders"));
  }
}

TEST_CASE("ako: checkpoints of the partial model, every node resumes from the newest common one",
          "[e2e][resume][ako]") {
  // Ako SoCC'16 sec. 4.3: the partial model is saved, the accumulation queue dropped.
  const std::string toml = job_toml("ako");
  Cluster first("resume-ako-first", kNodes, toml);
  const std::string ckpt = (first.dir() / "ckpt").string();
  const std::vector<std::string> ako = {"sync.ako.partitions=2", "checkpoint.dir=" + ckpt,
                                        "checkpoint.every=10"};
  auto with = [&](std::vector<std::string> sets, const std::string& more) {
    sets.insert(sets.begin(), ako.begin(), ako.end());
    sets.push_back(more);
    return sets;
  };
  run_ok(first, with({}, "job.max_iterations=20"));
  for (std::size_t r = 0; r < kNodes; ++r) {
    INFO("rank " << r);
    CHECK(first.metrics(r)["checkpoints_written"].get<int>() == 2);  // iterations 10 and 20
  }
  // Resumed with no iteration left: each node loads its replica of iteration 20 and the job ends
  // as the first one did (the mean of those replicas): the same bits.
  Cluster same("resume-ako-none", kNodes, toml);
  run_ok(same, with({}, "job.max_iterations=20"), {"--resume", ckpt});
  for (std::size_t r = 0; r < kNodes; ++r) {
    INFO(same.all_logs());
    CHECK(same.metrics(r)["resumed_from_iteration"].get<std::uint64_t>() == 20);
    CHECK(file_bytes(same.dir() / ("parameters-" + std::to_string(r) + ".f32")) ==
          file_bytes(first.dir() / ("parameters-" + std::to_string(r) + ".f32")));
  }
  // Resumed to iteration 30: the exchange starts again from there, and the job ends as usual.
  Cluster on("resume-ako-on", kNodes, toml);
  run_ok(on, with({}, "job.max_iterations=30"), {"--resume", ckpt});
  for (std::size_t r = 0; r < kNodes; ++r) {
    INFO(on.all_logs());
    const auto m = on.metrics(r);
    CHECK(m["resumed_from_iteration"].get<std::uint64_t>() == 20);
    CHECK(m["iterations"].get<std::uint64_t>() == 10);
    CHECK(m["rejected_messages"] == 0);
    CHECK(m["sync"]["gradients"] == 10);
  }
  CHECK(file_bytes(on.dir() / "parameters-0.f32") == file_bytes(on.dir() / "parameters-1.f32"));
}

TEST_CASE("a checkpoint.dir or --metrics-out that cannot be written fails at start-up naming it",
          "[e2e][resume][errors]") {
  const std::string toml = job_toml("ps");
  SECTION("checkpoint.dir is a regular file: exit 2 on every node before any iteration") {
    Cluster c("ckpt-dir-file", kNodes, toml);
    const auto file = c.dir() / "a-file";
    std::ofstream(file) << "not a folder";
    c.start({"--set", "checkpoint.dir=" + file.string()});
    const auto codes = c.wait(std::chrono::seconds(60));
    INFO(c.all_logs());
    CHECK(codes == std::vector<int>{2, 2});
    for (std::size_t r = 0; r < kNodes; ++r) {
      CHECK_THAT(c.log_text(r), Catch::Contains("checkpoint.dir = \"" + file.string() + "\": ") &&
                                    Catch::Contains("checked at start-up"));
      CHECK_THAT(c.log_text(r), !Catch::Contains("iter "));  // no progress line: no training
    }
    CHECK(file_bytes(file) == "not a folder");  // nothing written over it
  }
  SECTION("checkpoint.dir on a file system that takes no folders (/proc)") {
    Cluster c("ckpt-dir-proc", kNodes, toml);
    c.start({"--set", "checkpoint.dir=/proc/gradmesh-no-such-folder/ckpt"});
    const auto codes = c.wait(std::chrono::seconds(60));
    INFO(c.all_logs());
    CHECK(codes == std::vector<int>{2, 2});
    CHECK_THAT(c.log_text(0), Catch::Contains("checkpoint.dir = \"/proc/gradmesh-no-such-folder/"
                                              "ckpt\": cannot create the folder"));
  }
  SECTION("--metrics-out under a regular file: exit 2 at once") {
    const auto dir = std::filesystem::temp_directory_path() / "gradmesh-metrics-out-test";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const auto config = dir / "job.toml";
    std::ofstream(config) << toml;
    std::ofstream(dir / "a-file") << "x";
    const auto log = dir / "log.txt";
    const int code = run_to_end({GRADMESH_NODE_BINARY, "--config", config.string(), "--metrics-out",
                                 (dir / "a-file" / "out").string()},
                                log, std::chrono::seconds(60));
    INFO(read_file(log));
    CHECK(code == 2);
    CHECK_THAT(read_file(log),
               Catch::Contains("--metrics-out = \"" + (dir / "a-file" / "out").string() +
                               "\": cannot create the folder"));
  }
}
