// Tests for apps/node/device_profile.h (issue 58, item 3): a device profile written and read back
// bit for bit, and a bad one refused naming its file, line and key; a profile checked against
// the job's model and batch.

#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "apps/node/device_profile.h"
#include "engine/error.h"
#include "tasks/layers/layer_spec.h"
#include "tasks/model.h"
#include "tests/support/process.h"

using gradmesh::ConfigError;
using gradmesh::app::DeviceProfile;

namespace {

/// A profile of two layers with values that round badly in decimal.
DeviceProfile awkward_profile(bool codec) {
  DeviceProfile p;
  p.job = "a \"quoted\" job\\name";
  p.device = "CPU (oneDNN 2.6.3: convolutions jit:avx2)";
  p.compression = codec ? "int8" : "none";
  p.batch = 64;
  p.nodes = 4;
  p.layer_names = {"dense0", "relu1"};
  p.layer_parameters = {200960, 0};
  auto& m = p.measured;
  m.gemm_flops = 92541932887.76456;
  m.step_seconds_per_float = 0.1 + 0.2;
  m.half_encode_seconds_per_float = std::numeric_limits<double>::denorm_min();
  m.half_decode_seconds_per_float = 3.0;
  m.forward_seconds = {1.0 / 3.0, 0.0};
  m.backward_seconds = {std::numeric_limits<double>::max(), 1e-300};
  m.backward_input_seconds = {2.0 / 7.0, 6.462e-06};
  if (codec) {
    m.encode_seconds = {1e-5 / 3.0, 0.0};
    m.decode_seconds = {7e-7, 0.0};
  }
  return p;
}

std::filesystem::path write_text(const std::string& name, const std::string& text) {
  const auto path = gradmesh::testing::fresh_directory("device-profile") / name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("a device profile is read back bit for bit", "[device_profile]") {
  for (const bool codec : {false, true}) {
    INFO("codec times " << codec);
    const DeviceProfile p = awkward_profile(codec);
    const auto path = gradmesh::testing::fresh_directory("device-profile") / "p.toml";
    gradmesh::app::write_device_profile(p, "gradmesh-node profile --config x.toml -o p.toml", path);
    const DeviceProfile q = gradmesh::app::read_device_profile(path);
    CHECK(q.job == p.job);
    CHECK(q.device == p.device);
    CHECK(q.compression == p.compression);
    CHECK(q.batch == p.batch);
    CHECK(q.nodes == p.nodes);
    CHECK(q.layer_names == p.layer_names);
    CHECK(q.layer_parameters == p.layer_parameters);
    CHECK(q.measured.gemm_flops == p.measured.gemm_flops);
    CHECK(q.measured.step_seconds_per_float == p.measured.step_seconds_per_float);
    CHECK(q.measured.half_encode_seconds_per_float == p.measured.half_encode_seconds_per_float);
    CHECK(q.measured.half_decode_seconds_per_float == p.measured.half_decode_seconds_per_float);
    CHECK(q.measured.forward_seconds == p.measured.forward_seconds);
    CHECK(q.measured.backward_seconds == p.measured.backward_seconds);
    CHECK(q.measured.backward_input_seconds == p.measured.backward_input_seconds);
    CHECK(q.measured.encode_seconds == p.measured.encode_seconds);
    CHECK(q.measured.decode_seconds == p.measured.decode_seconds);
    CHECK(q.measured.links.nodes == 0);
    // Written again, the same text.
    CHECK(gradmesh::app::device_profile_text(q, "c") == gradmesh::app::device_profile_text(p, "c"));
  }
}

TEST_CASE("a bad device profile is refused, naming its file, line and key", "[device_profile]") {
  const std::string good = gradmesh::app::device_profile_text(awkward_profile(false), "c");
  const auto refused = [](const std::string& text) -> std::string {
    const auto path = write_text("bad.toml", text);
    try {
      (void)gradmesh::app::read_device_profile(path);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "accepted";
  };
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
  };
  // Line numbers: the header comment takes 3 lines and a blank; [profile] is line 5.
  CHECK_THAT(refused(replaced("batch = 64", "batch = 0")),
             Catch::Contains("bad.toml: [profile] batch = 0: expected an integer >= 1 (line 10)"));
  CHECK_THAT(refused(replaced("gemm_flops = ", "gemm_flops = -")),
             Catch::Contains("[profile] gemm_flops = -") &&
                 Catch::Contains("expected a finite number > 0 (line 12)"));
  CHECK_THAT(refused(replaced("forward_seconds = 0.0", "forward_seconds = \"fast\"")),
             Catch::Contains("[[layer]] 1 forward_seconds = 'fast': expected a finite number") &&
                 Catch::Contains("(line 27)"));
  CHECK_THAT(refused(replaced("name = \"relu1\"\n", "")),
             Catch::Contains("[[layer]] 1 (line 24) has no key name"));
  CHECK_THAT(refused(replaced("format = 1", "format = 2")),
             Catch::Contains("format = 2: expected 1 (line 6)"));
  CHECK_THAT(refused(replaced("[profile]", "[profile")), Catch::Contains("bad.toml: not a device "
                                                                         "profile") &&
                                                             Catch::Contains("(line 5)"));
  CHECK_THAT(refused("# nothing\n"), Catch::Contains("no [profile] table"));
  // Codec times on one layer and not the other.
  CHECK_THAT(refused(replaced("backward_input_seconds = 6.462e-06",
                              "backward_input_seconds = 6.462e-06\nencode_seconds = 1.0\n"
                              "decode_seconds = 1.0")),
             Catch::Contains("[[layer]] 1 (line 24) has encode_seconds and decode_seconds"));
}

TEST_CASE("a device profile must be of the job's model and batch", "[device_profile]") {
  gradmesh::tasks::Model model(
      gradmesh::tasks::parse_layer_specs({"dense:8", "relu", "dense:3", "softmax_cross_entropy"}),
      std::size_t{4}, 16, 1);
  DeviceProfile p;
  p.job = "tiny";
  p.batch = 16;
  p.nodes = 2;
  for (std::size_t l = 0; l < model.num_layers(); ++l) {
    p.layer_names.push_back(model.layer_name(l));
    p.layer_parameters.push_back(model.layer(l).parameter_count());
  }
  const std::filesystem::path path = "tiny.toml";
  CHECK_NOTHROW(gradmesh::app::check_profile_fits(p, model, 16, path));
  CHECK_THROWS_WITH(gradmesh::app::check_profile_fits(p, model, 32, path),
                    Catch::Contains("timed at batch 16") && Catch::Contains("batch_size is 32"));
  DeviceProfile other = p;
  other.layer_parameters[2] = 30;  // dense 8 -> 3: 27
  CHECK_THROWS_WITH(gradmesh::app::check_profile_fits(other, model, 16, path),
                    Catch::Contains("layer 2 (dense2) has 30 parameters, this job's layer 2 "
                                    "(dense2) 27"));
  other = p;
  other.layer_names.pop_back();
  other.layer_parameters.pop_back();
  CHECK_THROWS_WITH(gradmesh::app::check_profile_fits(other, model, 16, path),
                    Catch::Contains("has 2 layers, this job's model 3"));
}
