#include <functional>
#include <map>

#include "engine/error.h"
#include "sync/ako/ako_stage.h"
#include "sync/none_stage.h"
#include "sync/poseidon/poseidon_stage.h"
#include "sync/sync_stage.h"

namespace gradmesh::sync {

namespace {

using Factory = std::function<std::unique_ptr<SyncStage>(SyncContext)>;

struct Entry {
  std::string name;
  Factory make;  // empty: documented but not built yet
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"none", [](SyncContext c) -> std::unique_ptr<SyncStage> {
         if (c.nodes != 1) {
           throw ConfigError("sync.strategy = \"none\" trains a single node, but the peer list has " +
                             std::to_string(c.nodes) + " nodes: use ps (or run one node)");
         }
         return std::make_unique<NoneStage>(std::move(c));
       }},
      {"ps", [](SyncContext c) -> std::unique_ptr<SyncStage> {
         return std::make_unique<PoseidonStage>(std::move(c), "ps", PoseidonStage::SfbMode::kNever);
       }},
      {"poseidon", [](SyncContext c) -> std::unique_ptr<SyncStage> {
         const auto mode = PoseidonStage::parse_sfb_mode(c.options.poseidon.sfb);
         return std::make_unique<PoseidonStage>(std::move(c), "poseidon", mode);
       }},
      {"ako", [](SyncContext c) -> std::unique_ptr<SyncStage> {
         return std::make_unique<AkoStage>(std::move(c));
       }},
      {"allreduce", nullptr},
  };
  return entries;
}

std::string known_names() {
  std::string out;
  for (const Entry& e : registry()) {
    if (!out.empty()) out += ", ";
    out += e.name;
  }
  return out;
}

}  // namespace

std::vector<std::string> strategy_names() {
  std::vector<std::string> names;
  for (const Entry& e : registry()) names.push_back(e.name);
  return names;
}

std::unique_ptr<SyncStage> make_sync_stage(std::string_view name, SyncContext context) {
  for (const Entry& e : registry()) {
    if (e.name != name) continue;
    if (!e.make) {
      throw ConfigError("sync.strategy = \"" + std::string(name) +
                        "\": this strategy is not implemented yet in this build; available: none, ps, poseidon");
    }
    return e.make(std::move(context));
  }
  throw ConfigError("sync.strategy = \"" + std::string(name) + "\": expected one of " +
                    known_names());
}

}  // namespace gradmesh::sync
