#include "net/payload.h"

#include <cstring>

namespace gradmesh::net {

Payload Payload::allocate(std::size_t bytes) {
  if (bytes == 0) return Payload({}, nullptr, 0, true);
  // Default-initialised (uninitialised) bytes: the receive path overwrites all of them.
  std::shared_ptr<std::byte[]> buffer(new std::byte[bytes]);
  std::byte* data = buffer.get();
  return Payload(std::shared_ptr<const void>(std::move(buffer), data), data, bytes, true);
}

Payload Payload::copy_of(std::span<const std::byte> bytes) {
  Payload result = allocate(bytes.size());
  if (!bytes.empty()) std::memcpy(result.data_, bytes.data(), bytes.size());
  return result;
}

Payload Payload::view(std::span<const std::byte> bytes, std::shared_ptr<const void> keep_alive) {
  // The const_cast never leaks: mutable_bytes() refuses views.
  return Payload(std::move(keep_alive), const_cast<std::byte*>(bytes.data()), bytes.size(), false);
}

std::span<std::byte> Payload::mutable_bytes() {
  GRADMESH_CHECK(owned_, "Payload::mutable_bytes() on a view of caller-owned bytes");
  return {data_, size_};
}

}  // namespace gradmesh::net
