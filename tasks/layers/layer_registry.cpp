#include "tasks/layers/layer_registry.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "engine/error.h"
#include "tasks/layers/loss.h"

namespace gradmesh::tasks {
namespace {

/// Layer kinds and loss kinds share one namespace: a config entry names either.
struct Registry {
  std::mutex mutex;
  std::map<std::string, LayerFactory, std::less<>> factories;
  std::map<std::string, LossFactory, std::less<>> losses;
};

Registry& registry() {
  static Registry r;
  return r;
}

thread_local int accept_unknown_depth = 0;

/// Checks a kind a user registers (`what`: "register_layer" or "register_loss") against the
/// name rules and the built-in kinds, then adds it to `map` unless either map holds it.
template <typename Map, typename Factory>
void add_kind(const char* what, Map& map, std::string kind, Factory factory) {
  const bool name_ok = !kind.empty() && std::all_of(kind.begin(), kind.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
  const std::string call(what);
  GRADMESH_CHECK(name_ok, call + ": a kind is letters, digits and '_', got '" + kind + "'");
  const auto built_in = built_in_layer_kinds();
  GRADMESH_CHECK(std::find(built_in.begin(), built_in.end(), kind) == built_in.end(),
                 call + ": '" + kind + "' is a built-in layer kind");
  GRADMESH_CHECK(static_cast<bool>(factory), call + ": empty factory for '" + kind + "'");
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const bool taken = r.factories.count(kind) != 0 || r.losses.count(kind) != 0;
  GRADMESH_CHECK(!taken, call + ": '" + kind + "' is registered already");
  map.emplace(std::move(kind), std::move(factory));
}

/// A copy of `kind`'s factory in `map` (called outside the lock), or an empty one.
template <typename Map>
typename Map::mapped_type factory_of(const Map& map, std::string_view kind) {
  std::lock_guard lock(registry().mutex);
  const auto it = map.find(kind);
  return it == map.end() ? typename Map::mapped_type() : it->second;
}

template <typename Map>
std::vector<std::string> kinds_of(const Map& map) {
  std::lock_guard lock(registry().mutex);
  std::vector<std::string> kinds;
  for (const auto& entry : map) kinds.push_back(entry.first);
  return kinds;
}

}  // namespace

AcceptUnknownLayerKinds::AcceptUnknownLayerKinds() noexcept { ++accept_unknown_depth; }
AcceptUnknownLayerKinds::~AcceptUnknownLayerKinds() { --accept_unknown_depth; }
bool AcceptUnknownLayerKinds::active() noexcept { return accept_unknown_depth > 0; }

void register_layer(std::string kind, LayerFactory factory) {
  add_kind("register_layer", registry().factories, std::move(kind), std::move(factory));
}

void register_loss(std::string kind, LossFactory factory) {
  add_kind("register_loss", registry().losses, std::move(kind), std::move(factory));
}

bool is_registered_loss(std::string_view kind) {
  return factory_of(registry().losses, kind) != nullptr;
}

std::vector<std::string> registered_losses() { return kinds_of(registry().losses); }

std::unique_ptr<Loss> make_registered_loss(const LayerSpec& spec, std::size_t classes) {
  const LossFactory factory = factory_of(registry().losses, spec.kind);
  if (!factory) return nullptr;
  std::unique_ptr<Loss> loss = factory(spec, classes);
  if (!loss) throw ConfigError("the factory of loss kind '" + spec.kind + "' made no loss");
  return loss;
}

bool is_registered_layer(std::string_view kind) {
  return factory_of(registry().factories, kind) != nullptr;
}

std::vector<std::string> registered_layers() { return kinds_of(registry().factories); }

std::unique_ptr<Layer> make_registered_layer(const LayerSpec& spec, Shape input) {
  const LayerFactory factory = factory_of(registry().factories, spec.kind);
  if (!factory) return nullptr;
  std::unique_ptr<Layer> layer = factory(spec, std::move(input));
  if (!layer) throw ConfigError("the factory of layer kind '" + spec.kind + "' made no layer");
  return layer;
}

}  // namespace gradmesh::tasks
