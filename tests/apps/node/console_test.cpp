// A node's console on a terminal and away from one (issue 30 item 1): the progress bar and
// colours only on a terminal, NO_COLOR honoured, --progress obeyed. A real gradmesh-node, one
// node, on a pseudo-terminal (forkpty) and on a file.

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/support/process.h"

namespace fs = std::filesystem;

namespace {

const std::string kConfig =
    "job.name = \"console\"\n"
    "data.dataset = \"synthetic\"\n"
    "data.shape = [16]\n"
    "data.train_limit = 640\n"
    "data.test_limit = 100\n"
    "model.layers = [\"dense:16\", \"relu\", \"dense:10\", \"softmax_cross_entropy\"]\n"
    "optimizer.batch_size = 32\n"
    "sync.strategy = \"none\"\n"
    "planner.probe = false\n";

/// Whether this machine gives pseudo-terminals (a container or chroot without devpts does not).
bool have_pseudo_terminals() {
  int master = -1, slave = -1;
  if (::openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) return false;
  ::close(master);
  ::close(slave);
  return true;
}

/// Runs one gradmesh-node with `args` on a pseudo-terminal, with `env` ("NAME=value") added to
/// its environment; returns all it wrote (within 60 s, else it is killed and the test fails).
std::string run_on_terminal(const std::vector<std::string>& args,
                            const std::vector<std::string>& env) {
  std::vector<std::string> argv_text = {GRADMESH_NODE_BINARY};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_text = env;
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  REQUIRE(pid >= 0);
  if (pid == 0) {
    for (std::string& e : env_text) ::putenv(e.data());
    ::unsetenv("GRADMESH_CONSOLE");
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 200) > 0) {
      char buf[4096];
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n <= 0) break;  // EIO: the child's side closed
      out.append(buf, static_cast<std::size_t>(n));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      FAIL("gradmesh-node on a terminal did not finish within 60 s:\n" << out);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(master);
  INFO(out);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  return out;
}

bool has_colour(const std::string& text) { return text.find("\033[3") != std::string::npos; }

}  // namespace

TEST_CASE("a node draws its bar and colours on a terminal only, NO_COLOR and --progress obeyed",
          "[e2e][console]") {
  const fs::path dir = gradmesh::testing::fresh_directory("console");
  std::ofstream(dir / "job.toml") << kConfig;
  const std::vector<std::string> args = {"--config", (dir / "job.toml").string()};
  const bool terminals = have_pseudo_terminals();
  if (!terminals) WARN("no pseudo-terminals here (openpty failed): the terminal half is skipped");
  if (terminals) {
    const std::string out = run_on_terminal(args, {"TERM=xterm"});
    INFO(out);
    CHECK(out.find("\r[rank 0] epoch 1/1 [") != std::string::npos);  // the bar, drawn in place
    CHECK(has_colour(out));                                          // "[info]" in colour
  }
  if (terminals) {
    const std::string out = run_on_terminal(args, {"TERM=xterm", "NO_COLOR=1"});
    INFO(out);
    CHECK(out.find("\r[rank 0] epoch 1/1 [") != std::string::npos);
    CHECK_FALSE(has_colour(out));
  }
  // As mpirun runs several ranks, each on a terminal of its own: plain lines, no colour (one node
  // here, with its own --peers, so that MPI's variables are not read for peers).
  if (terminals) {
    std::vector<std::string> mpi = args;
    mpi.insert(mpi.end(), {"--peers", "127.0.0.1:1", "--rank", "0"});
    const std::string out =
        run_on_terminal(mpi, {"TERM=xterm", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK=0"});
    INFO(out);
    CHECK(out.find("\r[rank 0] epoch 1/1 [") == std::string::npos);
    CHECK_FALSE(has_colour(out));
  }
  if (terminals) {
    std::vector<std::string> none = args;
    none.insert(none.end(), {"--progress", "none"});
    const std::string out = run_on_terminal(none, {"TERM=xterm"});
    INFO(out);
    CHECK(out.find("\r[rank 0] epoch 1/1 [") == std::string::npos);
    CHECK(out.find("[rank 0] epoch 1/1  iter 20") != std::string::npos);  // the epoch line
  }
  {  // on a file: no bar, no colour, no carriage return
    gradmesh::testing::Process node({GRADMESH_NODE_BINARY, "--config", (dir / "job.toml").string()},
                                    dir / "log.txt");
    const auto code = node.wait_for(std::chrono::seconds(60));
    if (!code) node.kill_now();
    const std::string out = gradmesh::testing::read_file(dir / "log.txt");
    INFO(out);
    CHECK(code == 0);
    CHECK(out.find('\r') == std::string::npos);
    CHECK(out.find('\033') == std::string::npos);
    CHECK(out.find("[rank 0] epoch 1/1  iter 20") != std::string::npos);
  }
}
