#include "sync/compress/options.h"

#include "sync/compress/powersgd_model.h"
#include "topo/planner.h"

namespace gradmesh::sync {

OptionTable compression_option_table() {
  return {"compression",
          {choice_key("method", {std::string(kNoCompression), "powersgd"}),
           integer_key("rank", 1, 2, ""), integer_key("start_iteration", 0, 0, "iterations")}};
}

CompressionOptions compression_options(const OptionValues& values) {
  return {values.text("compression.method"), values.integer("compression.rank"),
          values.integer("compression.start_iteration")};
}

void add_compressed_schemes(const CompressionOptions& options, topo::PlannerInput& input) {
  if (options.method == "powersgd" && input.nodes > 1) {
    input.schemes.push_back(powersgd_scheme_model(static_cast<std::size_t>(options.rank)));
  }
}

}  // namespace gradmesh::sync
