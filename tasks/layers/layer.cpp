#include "tasks/layers/layer.h"

#include "tasks/cpu/cpu_backend.h"

namespace gradmesh::tasks {

Layer::Layer(Shape input, Shape output) noexcept
    : input_(input), output_(output), backend_(&cpu::host_backend()) {}

}  // namespace gradmesh::tasks
