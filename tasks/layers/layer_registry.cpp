#include "tasks/layers/layer_registry.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "engine/error.h"

namespace gradmesh::tasks {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, LayerFactory, std::less<>> factories;
};

Registry& registry() {
  static Registry r;
  return r;
}

thread_local int accept_unknown_depth = 0;

}  // namespace

AcceptUnknownLayerKinds::AcceptUnknownLayerKinds() noexcept { ++accept_unknown_depth; }
AcceptUnknownLayerKinds::~AcceptUnknownLayerKinds() { --accept_unknown_depth; }
bool AcceptUnknownLayerKinds::active() noexcept { return accept_unknown_depth > 0; }

void register_layer(std::string kind, LayerFactory factory) {
  const bool name_ok = !kind.empty() && std::all_of(kind.begin(), kind.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
  GRADMESH_CHECK(name_ok, "register_layer: a kind is letters, digits and '_', got '" + kind + "'");
  const auto built_in = built_in_layer_kinds();
  GRADMESH_CHECK(std::find(built_in.begin(), built_in.end(), kind) == built_in.end(),
                 "register_layer: '" + kind + "' is a built-in layer kind");
  GRADMESH_CHECK(static_cast<bool>(factory), "register_layer: empty factory for '" + kind + "'");
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const bool added = r.factories.emplace(kind, std::move(factory)).second;
  GRADMESH_CHECK(added, "register_layer: '" + kind + "' is registered already");
}

bool is_registered_layer(std::string_view kind) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.factories.find(kind) != r.factories.end();
}

std::vector<std::string> registered_layers() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> kinds;
  for (const auto& entry : r.factories) kinds.push_back(entry.first);
  return kinds;
}

std::unique_ptr<Layer> make_registered_layer(const LayerSpec& spec, Shape input) {
  LayerFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    const auto it = r.factories.find(spec.kind);
    if (it == r.factories.end()) return nullptr;
    factory = it->second;
  }
  std::unique_ptr<Layer> layer = factory(spec, std::move(input));
  if (!layer) throw ConfigError("the factory of layer kind '" + spec.kind + "' made no layer");
  return layer;
}

}  // namespace gradmesh::tasks
