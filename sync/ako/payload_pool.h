#pragma once
// A fixed pool of send buffers for Ako's partitions: a partition's bytes must stay unchanged until
// the transport has written them (net::Payload), so each send copies its range of g* into a pooled
// buffer that comes back to the pool when the transport drops its last reference.

#include <cstddef>
#include <functional>
#include <memory>
#include <span>

#include "net/payload.h"

namespace gradmesh::sync::ako {

namespace detail {
struct PoolState;
}

/// `buffers` buffers of `floats` floats each, allocated once. acquire() lends one; the lease's
/// payload() is a net::Payload::view whose keep_alive deleter returns the buffer to the pool —
/// whenever the last copy of that Payload dies, on whatever thread (usually the transport's loop
/// thread, after the socket write). The keep_alive's control block comes from a free list sized
/// for the buffers, so lending and returning never allocate in steady state.
///
/// Thread safety: every member may be called from any thread. The pool's storage lives until the
/// pool and every outstanding Payload are gone.
class PayloadPool {
 public:
  /// A borrowed buffer: write data(), then make exactly one payload() (the buffer returns to the
  /// pool when that Payload and all its copies are gone). A Lease whose payload() was never made
  /// returns its buffer when destroyed. Move-only.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();
    [[nodiscard]] bool valid() const noexcept { return pool_ != nullptr; }
    /// The whole buffer (`floats` floats), writable until payload() is made.
    [[nodiscard]] std::span<float> data() const noexcept;
    /// The first `floats` floats as a Payload view; ends the lease (ContractError if floats exceeds
    /// the buffer or the lease is invalid).
    [[nodiscard]] net::Payload payload(std::size_t floats);

   private:
    friend class PayloadPool;
    Lease(std::shared_ptr<detail::PoolState> pool, std::size_t index) noexcept;
    std::shared_ptr<detail::PoolState> pool_;  // null when invalid or after payload()
    std::size_t index_ = 0;
  };

  /// Throws gradmesh::ContractError if buffers or floats is 0.
  PayloadPool(std::size_t buffers, std::size_t floats);
  PayloadPool(const PayloadPool&) = delete;
  PayloadPool& operator=(const PayloadPool&) = delete;
  ~PayloadPool();

  /// A free buffer, or an invalid Lease when every buffer is lent out.
  [[nodiscard]] Lease acquire();
  /// Free buffers now.
  [[nodiscard]] std::size_t available() const;
  [[nodiscard]] std::size_t capacity() const noexcept { return buffers_; }
  /// Called (on the releasing thread, under the pool's lock: keep it short and never call back into
  /// the pool) each time a buffer comes back. Empty function: none. Clearing it waits for a call in
  /// progress, so after set_on_release({}) returns the old callback is never called again.
  void set_on_release(std::function<void()> callback);

 private:
  std::shared_ptr<detail::PoolState> state_;
  std::size_t buffers_;
};

}  // namespace gradmesh::sync::ako
