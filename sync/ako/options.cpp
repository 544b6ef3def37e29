#include "sync/ako/options.h"

#include "sync/sync_stage.h"

namespace gradmesh::sync {

OptionTable ako_option_table() {
  return {"ako",
          {word_or_rate_key("bandwidth", "auto"), choice_key("final", {"average", "fold"}),
           word_or_integer_key("partitions", "auto", 1, "\"auto\" or an integer >= 1"),
           integer_key("staleness", 0, 0, "iterations")}};
}

AkoOptions ako_options(const SyncOptions& options) {
  const OptionValues& v = options.values;
  AkoOptions out;
  if (!v.is("ako.partitions", "auto")) {
    out.partitions = static_cast<std::size_t>(v.integer("ako.partitions"));
  }
  out.staleness = static_cast<std::size_t>(v.integer("ako.staleness"));
  if (!v.is("ako.bandwidth", "auto")) out.bandwidth = v.number("ako.bandwidth");
  out.max_send_rate = options.max_send_rate;
  out.final_model = v.is("ako.final", "fold") ? AkoFinal::kFold : AkoFinal::kAverage;
  return out;
}

}  // namespace gradmesh::sync
