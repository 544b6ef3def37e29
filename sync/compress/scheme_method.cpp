#include "sync/compress/scheme_method.h"

namespace gradmesh::sync {

std::span<const SchemeMethod> scheme_methods() {
  static const std::vector<SchemeMethod> methods{powersgd_method()};
  return methods;
}

const SchemeMethod* find_scheme_method(std::string_view name) {
  for (const SchemeMethod& method : scheme_methods()) {
    if (method.name == name) return &method;
  }
  return nullptr;
}

}  // namespace gradmesh::sync
