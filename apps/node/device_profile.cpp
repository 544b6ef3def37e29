#include "apps/node/device_profile.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>

#include <toml++/toml.h>

#include "apps/config/config_schema.h"
#include "apps/node/toml_table.h"
#include "engine/error.h"
#include "tasks/model.h"

namespace gradmesh::app {

namespace {

constexpr std::int64_t kFormat = 1;

// The config's TOML printers: floats that read back to the same bits, quoted strings.
using detail::TableReader;
using detail::toml_float;
using detail::toml_quote;

}  // namespace

std::string device_profile_text(const DeviceProfile& p, const std::string& command) {
  const sync::JobMeasurements& m = p.measured;
  const bool codec = !m.encode_seconds.empty();
  std::string out;
  out += "# A gradmesh device profile (gradmesh-node simulate --device FILE), written by:\n";
  out += "#   " + command + "\n";
  out += "# Seconds per layer for one node's batch, FLOP/s, seconds per float.\n\n";
  out += "[profile]\n";
  out += "format = " + std::to_string(kFormat) + "\n";
  out += "job = " + toml_quote(p.job) + "\n";
  out += "device = " + toml_quote(p.device) + "\n";
  out += "compression = " + toml_quote(p.compression) + "\n";
  out += "batch = " + std::to_string(p.batch) + "\n";
  out += "nodes = " + std::to_string(p.nodes) + "\n";
  out += "gemm_flops = " + toml_float(m.gemm_flops) + "\n";
  out += "step_seconds_per_float = " + toml_float(m.step_seconds_per_float) + "\n";
  out += "half_encode_seconds_per_float = " + toml_float(m.half_encode_seconds_per_float) + "\n";
  out += "half_decode_seconds_per_float = " + toml_float(m.half_decode_seconds_per_float) + "\n";
  for (std::size_t l = 0; l < p.layer_names.size(); ++l) {
    out += "\n[[layer]]\n";
    out += "name = " + toml_quote(p.layer_names[l]) + "\n";
    out += "parameters = " + std::to_string(p.layer_parameters[l]) + "\n";
    out += "forward_seconds = " + toml_float(m.forward_seconds[l]) + "\n";
    out += "backward_seconds = " + toml_float(m.backward_seconds[l]) + "\n";
    out += "backward_input_seconds = " + toml_float(m.backward_input_seconds[l]) + "\n";
    if (codec) {
      out += "encode_seconds = " + toml_float(m.encode_seconds[l]) + "\n";
      out += "decode_seconds = " + toml_float(m.decode_seconds[l]) + "\n";
    }
  }
  return out;
}

void write_device_profile(const DeviceProfile& profile, const std::string& command,
                          const std::filesystem::path& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << device_profile_text(profile, command);
  out.close();
  if (!out) throw ConfigError(path.string() + ": cannot write the device profile");
}

DeviceProfile read_device_profile(const std::filesystem::path& path) {
  const toml::table root = detail::parse_toml_file(path, "a device profile");
  const toml::table* head = root["profile"].as_table();
  if (head == nullptr) {
    throw ConfigError(path.string() +
                      ": no [profile] table (a device profile is written by gradmesh-node "
                      "profile --config JOB -o FILE)");
  }
  const TableReader h(path, *head, "[profile]");
  if (h.integer("format", 1) != kFormat) {
    throw h.bad("format", h.node("format"), std::to_string(kFormat));
  }
  DeviceProfile p;
  p.job = h.text("job");
  p.device = h.text("device");
  p.compression = h.text("compression");
  p.batch = static_cast<std::size_t>(h.integer("batch", 1));
  p.nodes = static_cast<std::size_t>(h.integer("nodes", 1));
  sync::JobMeasurements& m = p.measured;
  m.links.nodes = 0;
  m.gemm_flops = h.number("gemm_flops", true);
  m.step_seconds_per_float = h.number("step_seconds_per_float");
  m.half_encode_seconds_per_float = h.number("half_encode_seconds_per_float");
  m.half_decode_seconds_per_float = h.number("half_decode_seconds_per_float");
  const toml::array* layers = root["layer"].as_array();
  if (layers == nullptr || layers->empty()) {
    throw ConfigError(path.string() + ": no [[layer]] tables (one a layer of the model)");
  }
  std::optional<bool> codec;
  for (std::size_t l = 0; l < layers->size(); ++l) {
    const std::string where = "[[layer]] " + std::to_string(l);
    const toml::table* table = &detail::table_entry(path, *layers->get(l), where);
    const TableReader t(path, *table, where);
    p.layer_names.push_back(t.text("name"));
    p.layer_parameters.push_back(static_cast<std::size_t>(t.integer("parameters", 0)));
    m.forward_seconds.push_back(t.number("forward_seconds"));
    m.backward_seconds.push_back(t.number("backward_seconds"));
    m.backward_input_seconds.push_back(t.number("backward_input_seconds"));
    const bool has_codec = t.has("encode_seconds") || t.has("decode_seconds");
    if (codec && *codec != has_codec) {
      throw ConfigError(path.string() + ": " + where + " (line " +
                        std::to_string(table->source().begin.line) + ") " +
                        (has_codec ? "has" : "lacks") +
                        " encode_seconds and decode_seconds where the layers before it " +
                        (has_codec ? "lack" : "have") + " them: every layer has both, or none");
    }
    codec = has_codec;
    if (has_codec) {
      m.encode_seconds.push_back(t.number("encode_seconds"));
      m.decode_seconds.push_back(t.number("decode_seconds"));
    }
  }
  return p;
}

void check_profile_fits(const DeviceProfile& profile, tasks::Model& model, std::size_t batch,
                        const std::filesystem::path& path) {
  const std::string source = path.string() + " (the profile of job '" + profile.job + "')";
  if (profile.layer_names.size() != model.num_layers()) {
    throw ConfigError(source + " has " + std::to_string(profile.layer_names.size()) +
                      " layers, this job's model " + std::to_string(model.num_layers()) +
                      ": write one for this job with gradmesh-node profile");
  }
  for (std::size_t l = 0; l < model.num_layers(); ++l) {
    const std::size_t parameters = model.layer(l).parameter_count();
    if (profile.layer_parameters[l] != parameters) {
      throw ConfigError(source + ": layer " + std::to_string(l) + " (" + profile.layer_names[l] +
                        ") has " + std::to_string(profile.layer_parameters[l]) +
                        " parameters, this job's layer " + std::to_string(l) + " (" +
                        model.layer_name(l) + ") " + std::to_string(parameters));
    }
  }
  if (profile.batch != batch) {
    throw ConfigError(source + " was timed at batch " + std::to_string(profile.batch) +
                      ", this job's optimizer.batch_size is " + std::to_string(batch) +
                      " (layer times follow the batch: write one at this batch)");
  }
}

}  // namespace gradmesh::app
