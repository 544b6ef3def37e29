#pragma once
// Bytes with shared ownership, moved by the transport without copies (ps-lite's SArray).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

#include "engine/error.h"

namespace gradmesh::net {

/// An immutable-once-sent run of bytes whose owner is reference counted.
///
/// Copies of a Payload share the same bytes (a copy costs one atomic increment). The transport
/// keeps a copy alive until the socket write of those bytes has completed, so a caller may drop
/// its Payload right after Transport::send(). Payloads received from the network are owned
/// buffers of exactly the frame's payload size, aligned to __STDCPP_DEFAULT_NEW_ALIGNMENT__.
///
/// Thread safety: like std::shared_ptr — distinct Payload objects may be used from different
/// threads even when they share bytes; the bytes themselves must not be written while any
/// thread may read them (in particular not after they were handed to send()).
class Payload final {
 public:
  /// Empty, 0 bytes.
  Payload() = default;

  /// An owned, uninitialised buffer of `bytes` bytes. Throws std::bad_alloc.
  [[nodiscard]] static Payload allocate(std::size_t bytes);

  /// An owned copy of `bytes`.
  [[nodiscard]] static Payload copy_of(std::span<const std::byte> bytes);

  /// No copy: refers to `bytes`, keeping `keep_alive` (if any) alive as long as this Payload or a
  /// copy of it lives. The caller guarantees the bytes stay valid and unchanged until every send
  /// of them has completed (without `keep_alive`, until Transport::shutdown() returns).
  [[nodiscard]] static Payload view(std::span<const std::byte> bytes,
                                    std::shared_ptr<const void> keep_alive = nullptr);

  /// The bytes. Valid as long as this Payload (or a copy) lives.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }

  /// Writable bytes of an owned buffer (allocate / copy_of / received). Throws
  /// gradmesh::ContractError for a view. Shared by every copy of this Payload.
  [[nodiscard]] std::span<std::byte> mutable_bytes();

  /// Size in bytes.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

  /// Whether the bytes belong to this Payload (allocate / copy_of / received), not a view.
  [[nodiscard]] bool owned() const noexcept { return owned_; }

  /// The bytes reinterpreted as an array of T (e.g. float). Throws gradmesh::ContractError when
  /// size() is not a multiple of sizeof(T) or the bytes are not aligned for T.
  template <class T>
  [[nodiscard]] std::span<const T> as() const {
    static_assert(std::is_trivially_copyable_v<T>, "Payload::as<T>() needs a trivially copyable T");
    GRADMESH_CHECK_EQ(size_ % sizeof(T), std::size_t{0},
                      "payload size is not a multiple of sizeof(T)");
    GRADMESH_CHECK_EQ(reinterpret_cast<std::uintptr_t>(data_) % alignof(T), std::uintptr_t{0},
                      "payload bytes are not aligned for T");
    return {reinterpret_cast<const T*>(data_), size_ / sizeof(T)};
  }

 private:
  Payload(std::shared_ptr<const void> owner, std::byte* data, std::size_t size, bool owned) noexcept
      : owner_(std::move(owner)), data_(data), size_(size), owned_(owned) {}

  std::shared_ptr<const void> owner_;
  std::byte* data_ = nullptr;  // writable only when owned_
  std::size_t size_ = 0;
  bool owned_ = false;
};

}  // namespace gradmesh::net
