// Tests for apps/config/config_schema.cpp: the whole key table walked (issue 13, item 6). Every
// key, given values of the wrong TOML type and values out of its range or set, in the file and by
// `--set KEY=VALUE`, is a ConfigError naming the key, the value and what was expected.

#include "apps/config/config_schema.h"

#include <array>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "apps/config/job_config.h"
#include "engine/error.h"

using gradmesh::ConfigError;
using gradmesh::app::parse_job_config;
using gradmesh::app::detail::key_specs;
using gradmesh::app::detail::KeySpec;
using gradmesh::app::detail::OverrideKind;

namespace {

constexpr std::string_view kMinimal = R"(
[model]
layers = ["dense:10", "softmax_cross_entropy"]
)";

/// A value of each TOML type, written as error messages print values back.
constexpr std::array<std::string_view, 7> kValueOfEachType{
    "true", "7", "2.5", "\"text\"", "[1, 2]", "{ a = 1 }", "1979-05-27"};

/// Values out of each key's range or set of values, as error messages print them. A key of the
/// table without a row here fails the walk: add one (or list it in kWithoutRange).
const std::multimap<std::string_view, std::string_view> kOutOfRange{
    {"checkpoint.every", "0"},
    {"checkpoint.every", "\"daily\""},
    {"checkpoint.keep", "0"},
    {"compute.cpu_kernels", "\"mkl\""},
    {"compute.device", "\"gpu\""},
    {"compute.threads", "-1"},
    {"data.classes", "1"},
    {"data.classes", "0"},
    {"data.dataset", "\"mnist\""},
    {"data.shape", "[]"},
    {"data.shape", "[0]"},
    {"data.shape", "[3, 64]"},
    {"data.shape", "[3, 64, -1]"},
    {"data.shape", "[16777217]"},
    {"data.normalize", "\"zscore\""},
    {"data.normalize", "\"Standardize\""},
    {"data.path", "\"\""},
    {"data.test_limit", "0"},
    {"data.test_limit", "\"all\""},
    {"data.train_limit", "0"},
    {"job.epochs", "0"},
    {"job.max_iterations", "0"},
    {"job.max_iterations", "\"never\""},
    {"job.name", "\"\""},
    {"job.on_nonfinite", "\"ignore\""},
    {"job.seed", "-1"},
    {"model.layers", "[]"},
    {"model.layers", "[\"dense:10\", \"\"]"},
    {"net.connect_timeout", "0"},
    {"net.connect_timeout", "-1.5"},
    {"net.connect_timeout", "inf"},
    {"net.handshake_timeout", "0"},
    {"net.handshake_timeout", "-2"},
    {"net.max_frame_bytes", "0"},
    {"net.max_frame_bytes", "1023"},
    {"net.max_send_rate", "0"},
    {"net.max_send_rate", "\"fast\""},
    {"net.max_send_rate", "\"-5mbit\""},
    {"net.min_nodes", "0"},
    {"net.min_nodes", "\"most\""},
    {"net.min_nodes", "2.5"},
    {"net.peer_timeout", "-1"},
    {"net.peer_timeout", "-0.5"},
    {"net.port", "0"},
    {"net.port", "65536"},
    {"optimizer.batch_size", "0"},
    {"optimizer.lr", "0"},
    {"optimizer.lr", "nan"},
    {"optimizer.momentum", "1.0"},
    {"optimizer.momentum", "-0.5"},
    {"optimizer.schedule", "\"step\""},
    {"optimizer.schedule", "\"Cosine\""},
    {"optimizer.weight_decay", "-0.5"},
    {"optimizer.weight_decay_exclude", "\"yes\""},
    {"model.sync_batch_norm", "1"},
    {"optimizer.algorithm", "\"lamb\""},
    {"optimizer.beta1", "1.0"},
    {"optimizer.beta2", "-0.1"},
    {"optimizer.eps", "0"},
    {"planner.alpha", "0"},
    {"planner.alpha", "\"measured\""},
    {"planner.bandwidth", "0"},
    {"planner.bandwidth", "\"fast\""},
    {"planner.gemm_flops", "-1"},
    {"planner.message_overhead", "-0.001"},
    {"sync.ako.bandwidth", "-1"},
    {"sync.ako.partitions", "0"},
    {"sync.ako.staleness", "-1"},
    {"sync.ako.final", "\"mean\""},
    {"sync.compression.method", "\"zip\""},
    {"sync.compression.rank", "0"},
    {"sync.compression.ratio", "0"},
    {"sync.compression.ratio", "1.5"},
    {"sync.compression.ratio", "\"all\""},
    {"sync.compression.start_iteration", "-1"},
    {"sync.compression.bits", "3"},
    {"sync.compression.bits", "16"},
    {"sync.local.steps", "0"},
    {"sync.local.steps", "\"often\""},
    {"sync.local.outer", "\"adam\""},
    {"sync.local.outer_lr", "0"},
    {"sync.local.outer_lr", "-0.5"},
    {"sync.local.outer_momentum", "1"},
    {"sync.local.outer_momentum", "-0.1"},
    {"sync.local.overlap", "\"always\""},
    {"sync.local.fragments", "0"},
    {"sync.local.fragments", "\"two\""},
    {"sync.local.quorum", "0"},
    {"sync.local.quorum", "\"most\""},
    {"sync.poseidon.choose", "\"flops\""},
    {"sync.poseidon.sfb", "\"sometimes\""},
    {"sync.ps.chunk_bytes", "0"},
    {"sync.ps.chunk_bytes", "1022"},
    {"sync.ps.chunk_bytes", "\"big\""},
    {"sync.strategy", "\"foo\""},
};

/// Keys whose only bad values are of the wrong type.
const std::set<std::string_view> kWithoutRange{"checkpoint.dir", "planner.probe",
                                               "security.encrypt", "security.secret_file",
                                               "sync.compression.momentum_correction"};

/// `value` (TOML text) for `spec.key` in a config file; model.layers replaces the minimal one's,
/// another model key joins its [model] table.
std::string file_with(const KeySpec& spec, std::string_view value) {
  const std::size_t dot = spec.key.rfind('.');
  const std::string entry = "[" + std::string(spec.key.substr(0, dot)) + "]\n" +
                            std::string(spec.key.substr(dot + 1)) + " = " + std::string(value) +
                            "\n";
  if (spec.key == "model.layers") return entry;
  std::string text(kMinimal);
  if (spec.key.starts_with("model.")) {  // into the minimal config's [model] table
    const std::size_t table = text.find("[model]\n");
    REQUIRE(table != std::string::npos);
    text.insert(table + 8, entry.substr(entry.find('\n') + 1));
    return text;
  }
  return text + entry;
}

/// The error of parsing `text` with `overrides`, or "" when it parses.
std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    (void)parse_job_config(text, "configs/x.toml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

/// Whether `value` is a TOML string ("\"text\""): --set reads a string key's non-string VALUE as
/// a bare string, and model.layers's as a bare list.
bool is_toml_string(std::string_view value) { return value.starts_with('"'); }

/// Checks `message` is the error for `spec` given `shown` (the value as printed) from `source`.
void check_names_key_value_expected(const std::string& message, std::string_view source,
                                    const KeySpec& spec, const std::string& shown) {
  CHECK_THAT(message, Catch::StartsWith(std::string(source) + ": "));
  CHECK_THAT(message, Catch::Contains(std::string(spec.key) + " = " + shown + ": expected " +
                                      std::string(spec.expected)));
}

}  // namespace

TEST_CASE("every key refuses each wrong TOML type, naming key, value and expected form",
          "[config][schema]") {
  for (const KeySpec& spec : key_specs()) {
    std::size_t refused = 0;
    for (const std::string_view value : kValueOfEachType) {
      INFO(spec.key << " = " << value);
      const std::string in_file = error_of(file_with(spec, value));
      if (!in_file.empty()) {
        ++refused;
        check_names_key_value_expected(in_file, "configs/x.toml", spec, std::string(value));
      }

      const std::string set = std::string(spec.key) + "=" + std::string(value);
      const std::string by_set = error_of(std::string(kMinimal), {set});
      if (spec.override_kind == OverrideKind::kLayerList && is_toml_string(value)) {
        // --set model.layers="text" is the bare list ["text"]: its entry is refused as a layer.
        CHECK_THAT(by_set, Catch::StartsWith("--set: model.layers[0]: expected 'dense:<units>'") &&
                               Catch::Contains(
                                   "got '" + std::string(value.substr(1, value.size() - 2)) + "'"));
      } else if (spec.override_kind == OverrideKind::kString && !is_toml_string(value)) {
        // --set compute.device=7 is the string "7": refused as a string, never as a number.
        if (!by_set.empty())
          check_names_key_value_expected(by_set, "--set", spec,
                                         gradmesh::app::detail::toml_quote(value));
      } else {
        CHECK(by_set.empty() == in_file.empty());
        if (!by_set.empty()) {
          check_names_key_value_expected(by_set, "--set", spec, std::string(value));
        }
      }
    }
    INFO(spec.key);
    // A key takes three types at most (a string word such as "auto", an integer, a float), so
    // at least four of the seven are wrong.
    CHECK(refused >= 4);
  }
}

TEST_CASE("every key refuses values out of its range or set, naming key, value and expected form",
          "[config][schema]") {
  for (const KeySpec& spec : key_specs()) {
    INFO(spec.key);
    const auto [first, last] = kOutOfRange.equal_range(spec.key);
    if (kWithoutRange.contains(spec.key)) {
      CHECK(first == last);
      continue;
    }
    CHECK(first != last);  // a key without a row here: add its out-of-range values above
    for (auto row = first; row != last; ++row) {
      const std::string value(row->second);
      INFO(spec.key << " = " << value);
      check_names_key_value_expected(error_of(file_with(spec, value)), "configs/x.toml", spec,
                                     value);
      check_names_key_value_expected(
          error_of(std::string(kMinimal), {std::string(spec.key) + "=" + value}), "--set", spec,
          value);
    }
  }
  for (const auto& [key, value] : kOutOfRange) {
    INFO(key);
    CHECK(gradmesh::app::detail::find_key(key) != nullptr);  // no row for a key that is gone
  }
}
