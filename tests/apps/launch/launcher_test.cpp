// Tests for apps/launch/launcher.cpp: the command each node gets, port picking, and the built
// gradmesh-launch binary run against a fake node (a shell script) on loopback.

#include "apps/launch/launcher.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"

namespace fs = std::filesystem;
using gradmesh::app::LaunchOptions;

namespace {

/// Behaviour by FAKE_MODE: prints its arguments and a stderr line, then
///   ok          exit 0
///   fail        rank FAKE_FAIL_RANK exits FAKE_FAIL_CODE at once; the others sleep 30 s
///   stubborn    like fail, but the others ignore SIGTERM
///   finish      like fail, but the others exit 0 after 0.3 s (within the grace period)
///   partial     writes a line in two pieces and ends without a newline
///   trap        prints "ready", then on SIGTERM prints "got TERM" and exits 0
constexpr const char* kFakeNode = R"(#!/bin/sh
rank=""
prev=""
for a in "$@"; do
  if [ "$prev" = "--rank" ]; then rank="$a"; fi
  prev="$a"
done
echo "args: $*"
echo "stderr line from $rank" >&2
case "${FAKE_MODE:-ok}" in
  ok) exit 0 ;;
  fail)
    if [ "$rank" = "$FAKE_FAIL_RANK" ]; then exit "$FAKE_FAIL_CODE"; fi
    exec sleep 30 ;;
  stubborn)
    if [ "$rank" = "$FAKE_FAIL_RANK" ]; then exit "$FAKE_FAIL_CODE"; fi
    trap '' TERM
    exec sleep 30 ;;
  finish)
    if [ "$rank" = "$FAKE_FAIL_RANK" ]; then exit "$FAKE_FAIL_CODE"; fi
    sleep 0.3
    exit 0 ;;
  partial)
    printf 'abc'
    sleep 0.2
    printf 'def\nsecond line\n'
    printf 'tail without newline'
    exit 0 ;;
  trap)
    sleep 30 &
    child=$!
    trap 'echo "got TERM"; kill $child; exit 0' TERM
    echo ready
    wait $child ;;
esac
)";

constexpr const char* kConfig = R"([model]
layers = ["dense:10", "softmax_cross_entropy"]
)";

/// A scratch directory with a fake node and a config, removed at the end.
class Scratch {
 public:
  Scratch() {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("gradmesh_launch_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
    std::ofstream(node()) << kFakeNode;
    fs::permissions(node(), fs::perms::owner_all);
    std::ofstream(config()) << kConfig;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  [[nodiscard]] fs::path dir() const { return dir_; }
  [[nodiscard]] fs::path node() const { return dir_ / "fake-node.sh"; }
  [[nodiscard]] fs::path config() const { return dir_ / "job.toml"; }

 private:
  fs::path dir_;
};

struct Result {
  int rc = -1;
  std::string out;
  std::string err;
  double seconds = 0.0;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs `env_and_args` as "ENV... gradmesh-launch ARGS" through the shell.
Result launch(const Scratch& s, const std::string& env, const std::string& args) {
  const std::string command = env + " " + GRADMESH_LAUNCH_BINARY + " " + args + " >" +
                              (s.dir() / "out").string() + " 2>" + (s.dir() / "err").string();
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(command.c_str());
  Result r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(s.dir() / "out");
  r.err = slurp(s.dir() / "err");
  return r;
}

std::string base_args(const Scratch& s, std::size_t n) {
  return "-n " + std::to_string(n) + " --config " + s.config().string() + " --node " +
         s.node().string();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("node_command passes config, peers, rank, metrics, overrides and extras", "[launch]") {
  LaunchOptions o;
  o.nodes = 2;
  o.config = "configs/job.toml";
  o.node_binary = "/opt/bin/gradmesh-node";
  o.metrics_out = "/tmp/m";
  o.overrides = {"optimizer.lr=0.1", "sync.strategy=ako"};
  o.node_args = {"--verbose"};
  const std::vector<std::string> expected{"/opt/bin/gradmesh-node",
                                          "--config",
                                          "configs/job.toml",
                                          "--peers",
                                          "127.0.0.1:5000,127.0.0.1:5001",
                                          "--rank",
                                          "1",
                                          "--metrics-out",
                                          "/tmp/m",
                                          "--set",
                                          "optimizer.lr=0.1",
                                          "--set",
                                          "sync.strategy=ako",
                                          "--verbose"};
  CHECK(gradmesh::app::node_command(o, {5000, 5001}, 1) == expected);
  o.metrics_out.reset();
  o.overrides.clear();
  o.node_args.clear();
  CHECK(gradmesh::app::node_command(o, {5000, 5001}, 0).size() == 7);
  o.resume = "/tmp/ckpt";  // --resume DIR reaches every node
  const auto with_resume = gradmesh::app::node_command(o, {5000, 5001}, 1);
  REQUIRE(with_resume.size() == 9);
  CHECK(with_resume[7] == "--resume");
  CHECK(with_resume[8] == "/tmp/ckpt");
}

TEST_CASE("pick_ports gives distinct free ports, or a consecutive range", "[launch]") {
  const auto ports = gradmesh::app::pick_ports(8, 0, "127.0.0.1");
  CHECK(ports.size() == 8);
  CHECK(std::set<std::uint16_t>(ports.begin(), ports.end()).size() == 8);
  for (const auto p : ports) CHECK(p != 0);
  CHECK(gradmesh::app::pick_ports(3, 41000, "127.0.0.1") ==
        std::vector<std::uint16_t>{41000, 41001, 41002});
  CHECK_THROWS_AS(gradmesh::app::pick_ports(3, 65534, "127.0.0.1"), gradmesh::ConfigError);
  CHECK_THROWS_AS(gradmesh::app::pick_ports(1, 0, "localhost"), gradmesh::ConfigError);
}

TEST_CASE("every node gets the same peers, its own rank, and a prefixed output", "[launch]") {
  Scratch s;
  const Result r =
      launch(s, "FAKE_MODE=ok",
             base_args(s, 3) + " --all-ranks --metrics-out " + (s.dir() / "metrics").string() +
                 " --set optimizer.lr=0.1 --set sync.strategy=ako -- --extra-flag x");
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.rc == 0);
  CHECK(fs::is_directory(s.dir() / "metrics"));

  const std::regex line_re(R"(\[(\d+)\] args: --config (\S+) --peers (\S+) --rank (\d+) )"
                           R"(--metrics-out (\S+) --set optimizer.lr=0.1 --set )"
                           R"(sync.strategy=ako --extra-flag x)");
  std::set<std::string> peer_lists;
  std::set<std::string> ranks;
  const auto out_lines = lines_of(r.out);
  REQUIRE(out_lines.size() == 3);
  for (const std::string& line : out_lines) {
    std::smatch m;
    REQUIRE(std::regex_match(line, m, line_re));
    CHECK(m[1] == m[4]);  // the prefix is the node's own rank
    CHECK(m[2] == s.config().string());
    ranks.insert(m[4]);
    peer_lists.insert(m[3]);
  }
  CHECK(ranks == std::set<std::string>{"0", "1", "2"});
  REQUIRE(peer_lists.size() == 1);
  const std::regex peers_re(R"(127\.0\.0\.1:(\d+),127\.0\.0\.1:(\d+),127\.0\.0\.1:(\d+))");
  std::smatch pm;
  const std::string peers = *peer_lists.begin();
  REQUIRE(std::regex_match(peers, pm, peers_re));
  CHECK(std::set<std::string>{pm[1], pm[2], pm[3]}.size() == 3);

  const auto err_lines = lines_of(r.err);
  for (const std::string rank : {"0", "1", "2"}) {
    CHECK(std::count(err_lines.begin(), err_lines.end(),
                     "[" + rank + "] stderr line from " + rank) == 1);
  }
}

TEST_CASE("a base port (--base-port) gives consecutive ports", "[launch]") {
  Scratch s;
  const Result r = launch(s, "FAKE_MODE=ok", base_args(s, 2) + " --base-port 41234");
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("--peers 127.0.0.1:41234,127.0.0.1:41235 --rank 0"));
  CHECK_THAT(r.out, Catch::Contains("--peers 127.0.0.1:41234,127.0.0.1:41235 --rank 1"));
}

TEST_CASE("partial lines are joined, never split or interleaved", "[launch]") {
  Scratch s;
  const Result r = launch(s, "FAKE_MODE=partial", base_args(s, 2) + " --all-ranks");
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  const auto lines = lines_of(r.out);
  CHECK(lines.size() == 8);  // per node: args, abcdef, second line, tail
  for (const std::string rank : {"0", "1"}) {
    const std::string p = "[" + rank + "] ";
    CHECK(std::count(lines.begin(), lines.end(), p + "abcdef") == 1);
    CHECK(std::count(lines.begin(), lines.end(), p + "second line") == 1);
    CHECK(std::count(lines.begin(), lines.end(), p + "tail without newline") == 1);
  }
}

TEST_CASE(
    "by default the nodes' lines merge: what every node printed appears once, the rest with "
    "its ranks, and --log-dir keeps each node's whole output",
    "[launch]") {
  Scratch s;
  const fs::path logs = s.dir() / "logs";
  const Result r = launch(s, "FAKE_MODE=partial", base_args(s, 2) + " --log-dir " + logs.string());
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  const auto lines = lines_of(r.out);
  REQUIRE(lines.size() == 5);  // each node's own args line, then the three they share
  // The two nodes' own lines first, in the order their output reached the launcher.
  const std::set<std::string> own{lines[0].substr(0, 15), lines[1].substr(0, 15)};
  CHECK(own == std::set<std::string>{"[rank 0] args: ", "[rank 1] args: "});
  CHECK(std::vector<std::string>(lines.begin() + 2, lines.end()) ==
        std::vector<std::string>{"abcdef", "second line", "tail without newline"});
  // stderr is relayed as it comes, with the rank
  const auto err_lines = lines_of(r.err);
  CHECK(std::count(err_lines.begin(), err_lines.end(), "[0] stderr line from 0") == 1);
  for (const std::string rank : {"0", "1"}) {
    const std::string log = slurp(logs / ("node-" + rank + ".log"));
    CHECK_THAT(log, Catch::StartsWith("args: --config") && Catch::Contains("\nabcdef\n") &&
                        Catch::Contains("stderr line from " + rank));
  }
}

TEST_CASE("a failing node makes the launcher fail, name it, and stop the others", "[launch]") {
  Scratch s;
  const Result r = launch(s, "FAKE_MODE=fail FAKE_FAIL_RANK=1 FAKE_FAIL_CODE=3",
                          base_args(s, 3) + " --grace-seconds 0.5 --kill-after-seconds 1");
  INFO(r.out << r.err);
  CHECK(r.rc == 1);
  CHECK(r.seconds < 5.0);  // the others sleep 30 s: they were terminated
  CHECK_THAT(r.err, Catch::Contains("rank 1 exited with code 3; the other nodes have 0.5 s"));
  CHECK_THAT(r.err, Catch::Contains("sending SIGTERM to ranks 0, 2"));
  CHECK_THAT(r.err, Catch::Contains("3 of 3 nodes failed: rank 0 was killed by SIGTERM (sent by "
                                    "the launcher); rank 1 exited with code 3 (first to fail); "
                                    "rank 2 was killed by SIGTERM (sent by the launcher)"));
}

TEST_CASE("nodes that ignore SIGTERM get SIGKILL", "[launch]") {
  Scratch s;
  const Result r = launch(s, "FAKE_MODE=stubborn FAKE_FAIL_RANK=0 FAKE_FAIL_CODE=7",
                          base_args(s, 2) + " --grace-seconds 0.3 --kill-after-seconds 0.5");
  INFO(r.out << r.err);
  CHECK(r.rc == 1);
  CHECK(r.seconds < 5.0);
  CHECK_THAT(r.err, Catch::Contains("sending SIGKILL to rank 1"));
  CHECK_THAT(r.err, Catch::Contains("rank 0 exited with code 7 (first to fail); rank 1 was "
                                    "killed by SIGKILL (sent by the launcher)"));
}

TEST_CASE("nodes that finish within the grace period are not killed", "[launch]") {
  Scratch s;
  const Result r = launch(s, "FAKE_MODE=finish FAKE_FAIL_RANK=2 FAKE_FAIL_CODE=5",
                          base_args(s, 3) + " --grace-seconds 5");
  INFO(r.out << r.err);
  CHECK(r.rc == 1);
  CHECK(r.seconds < 4.0);
  CHECK_THAT(r.err, Catch::Contains("1 of 3 nodes failed: rank 2 exited with code 5"));
  CHECK_THAT(r.err, !Catch::Contains("sending"));
}

TEST_CASE("a job that survives a failed node keeps its other nodes running past the grace period",
          "[launch]") {
  // ako, or a BSP strategy with checkpoint.dir (README "When a peer fails"): the others go on.
  const std::string checkpoints = (fs::temp_directory_path() / "x").string();
  for (const std::string& sets : {std::string(" --set sync.strategy=ako"),
                                  " --set sync.strategy=ps --set checkpoint.dir=" + checkpoints}) {
    Scratch s;
    const Result r = launch(s, "FAKE_MODE=finish FAKE_FAIL_RANK=2 FAKE_FAIL_CODE=5",
                            base_args(s, 3) + sets + " --grace-seconds 0.05");
    INFO(sets << "\n" << r.out << r.err);
    CHECK(r.rc == 1);  // a node failed
    CHECK_THAT(r.err,
               Catch::Contains("rank 2 exited with code 5; the other nodes go on without it"));
    CHECK_THAT(r.err, !Catch::Contains("sending"));  // 0.3 s > the grace: they were left running
    CHECK_THAT(r.err, Catch::Contains("1 of 3 nodes failed: rank 2 exited with code 5"));
  }
}

TEST_CASE("SIGTERM to the launcher is forwarded to the nodes", "[launch]") {
  Scratch s;
  const std::string out = (s.dir() / "out").string();
  const std::string script = "FAKE_MODE=trap " + std::string(GRADMESH_LAUNCH_BINARY) + " " +
                             base_args(s, 2) + " --all-ranks >" + out + " 2>" +
                             (s.dir() / "err").string() + " & pid=$!\n" + "i=0; while [ \"$(cat " +
                             out +
                             " 2>/dev/null | grep -c ready)\" -lt 2 ] && "
                             "[ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done\n"
                             "kill -TERM $pid\nwait $pid\nexit $?\n";
  std::ofstream(s.dir() / "run.sh") << script;
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(("sh " + (s.dir() / "run.sh").string()).c_str());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string stdout_text = slurp(out);
  const std::string stderr_text = slurp(s.dir() / "err");
  INFO(stdout_text << stderr_text);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + 15);
  CHECK(seconds < 8.0);
  CHECK_THAT(stdout_text, Catch::Contains("[0] got TERM") && Catch::Contains("[1] got TERM"));
  CHECK_THAT(stderr_text, Catch::Contains("got SIGTERM: forwarding it to the nodes"));
}

TEST_CASE("bad launcher arguments are clear errors", "[launch]") {
  Scratch s;
  SECTION("no nodes") {
    const Result r = launch(s, "", base_args(s, 0));
    CHECK(r.rc != 0);
    CHECK_THAT(r.err, Catch::Contains("-n 0: expected a node count >= 1"));
  }
  SECTION("missing config") {
    const Result r =
        launch(s, "", "-n 2 --config /nonexistent/job.toml --node " + s.node().string());
    CHECK(r.rc == 2);
    CHECK_THAT(r.err, Catch::Contains("/nonexistent/job.toml") && Catch::Contains("no such file"));
  }
  SECTION("invalid config or override: reported once, before any node starts") {
    const Result r = launch(s, "", base_args(s, 2) + " --set optimizer.lr=-1");
    CHECK(r.rc == 2);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Catch::Contains("optimizer.lr = -1: expected a number > 0"));
  }
  SECTION("missing node binary") {
    const Result r = launch(
        s, "", "-n 2 --config " + s.config().string() + " --node /nonexistent/gradmesh-node");
    CHECK(r.rc == 2);
    CHECK_THAT(r.err, Catch::Contains("node binary '/nonexistent/gradmesh-node' does not exist"));
  }
  SECTION("node binary not executable") {
    fs::permissions(s.node(), fs::perms::owner_read | fs::perms::owner_write);
    const Result r = launch(s, "", base_args(s, 2));
    CHECK(r.rc == 2);
    CHECK_THAT(r.err, Catch::Contains("node binary '" + s.node().string() +
                                      "' is not an executable file"));
  }
  SECTION("default node binary is next to the launcher") {
    const fs::path expected = fs::path(GRADMESH_LAUNCH_BINARY).parent_path() / "gradmesh-node";
    if (!fs::exists(expected)) {
      const Result r = launch(s, "", "-n 1 --config " + s.config().string());
      CHECK(r.rc == 2);
      CHECK_THAT(r.err, Catch::Contains("node binary '" + expected.string() + "'"));
    }
  }
  SECTION("missing -n") {
    const Result r = launch(s, "", "--config " + s.config().string());
    CHECK(r.rc != 0);
    CHECK_THAT(r.err, Catch::Contains("--nodes"));
  }
}
