// End-to-end test of sealed frames (README "Security"; net/tcp/frame_cipher.h): real
// gradmesh-node processes on 127.0.0.1 train the same model with no secret, with a secret and
// every frame encrypted (security.encrypt, the default), and with a secret in clear; the cipher
// changes the bytes on the wire, never what arrives, so the three end bitwise equal.

#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "tests/apps/node/cluster.h"

using gradmesh::testing::Cluster;

namespace {

constexpr std::size_t kNodes = 2;

std::string job_toml() {
  std::ostringstream out;
  out << "[job]\nname = \"sealed\"\nseed = 5\nepochs = 1\nmax_iterations = 15\n"
      << "[data]\npath = \"/usr/share/datasets/fashion-mnist\"\ntrain_limit = 640\n"
      << "test_limit = 200\n"
      << "[model]\nlayers = [\"dense:32\", \"relu\", \"dense:10\", \"softmax_cross_entropy\"]\n"
      << "[optimizer]\nlr = 0.05\nmomentum = 0.9\nbatch_size = 16\n"
      << "[sync]\nstrategy = \"ps\"\n"
      << "[planner]\nprobe = false\n"
      << "[net]\nconnect_timeout = 20.0\n";
  return out.str();
}

struct Trained {
  std::vector<std::string> parameters;  // each rank's, byte for byte
  std::uint64_t bytes_sent = 0;         // rank 0's
  std::string log;                      // rank 0's
};

// Runs the job with `sets` (KEY=VALUE), with a job secret or without.
Trained train(const std::string& name, const std::vector<std::string>& sets, bool with_secret) {
  Cluster cluster(name, kNodes, job_toml());
  std::vector<std::string> args{"--save-parameters"};
  if (with_secret) {
    const auto secret = cluster.dir() / "secret";
    std::ofstream(secret) << "a job secret for the sealed-frames test\n";
    args.insert(args.end(), {"--set", "security.secret_file=" + secret.string()});
  }
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
  cluster.start(args);
  const auto codes = cluster.wait(std::chrono::seconds(90));
  INFO(cluster.all_logs());
  REQUIRE(codes == std::vector<int>(kNodes, 0));
  Trained trained;
  trained.bytes_sent = cluster.metrics(0)["bytes_sent"].get<std::uint64_t>();
  trained.log = cluster.log_text(0);
  auto& parameters = trained.parameters;
  for (std::size_t r = 0; r < kNodes; ++r) {
    CHECK(cluster.metrics(r)["unverified_frames"].get<std::uint64_t>() == 0);
    CHECK(cluster.metrics(r)["iterations"].get<std::uint64_t>() == 15);
    std::ifstream in(cluster.dir() / ("parameters-" + std::to_string(r) + ".f32"),
                     std::ios::binary);
    parameters.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    REQUIRE(parameters.back().size() > 0);
  }
  return trained;
}

}  // namespace

TEST_CASE("nodes that encrypt every frame train bitwise the same as nodes that do not",
          "[e2e][security]") {
  const auto plain = train("sealed-none", {}, false);
  const auto sealed = train("sealed-on", {}, true);
  const auto clear = train("sealed-off", {"security.encrypt=false"}, true);
  for (std::size_t r = 0; r < kNodes; ++r) {
    INFO("rank " << r);
    CHECK(sealed.parameters[r] == plain.parameters[r]);  // bitwise
    CHECK(clear.parameters[r] == plain.parameters[r]);
  }
  // The sealed run put its tags on the wire (16 bytes after each header and each payload) and
  // says so; the run in clear warns.
  CHECK(sealed.bytes_sent > clear.bytes_sent);
  CHECK_THAT(sealed.log, Catch::Contains("every frame after that encrypted and authenticated"));
  CHECK_THAT(clear.log, Catch::Contains("security.encrypt = false"));
  CHECK_THAT(plain.log, Catch::Contains("no job secret"));
}
