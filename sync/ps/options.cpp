#include "sync/ps/options.h"

namespace gradmesh::sync {

OptionTable ps_option_table() {
  return {"ps",
          {word_or_integer_key("chunk_bytes", "auto", 1,
                               "\"auto\" or an integer > 0 that is a multiple of 4 (bytes)",
                               [](std::int64_t bytes) { return bytes % 4 == 0; })}};
}

PsOptions ps_options(const OptionValues& values) {
  PsOptions options;
  if (!values.is("ps.chunk_bytes", "auto")) {
    options.chunk_bytes = static_cast<std::size_t>(values.integer("ps.chunk_bytes"));
  }
  return options;
}

}  // namespace gradmesh::sync
