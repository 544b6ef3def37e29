#include "sync/ako/payload_pool.h"

#include <cstdint>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "engine/error.h"

namespace gradmesh::sync::ako {

namespace detail {

/// The pool's storage, shared by the pool and every outstanding keep_alive.
struct PoolState {
  /// Room for one shared_ptr control block (deleter + allocator inside); checked at compile time
  /// below against libstdc++'s / libc++'s layout, with a fall-back to operator new if larger.
  static constexpr std::size_t kBlockBytes = 128;
  struct alignas(std::max_align_t) Block {
    std::byte bytes[kBlockBytes];
  };

  PoolState(std::size_t buffers, std::size_t buffer_floats)
      : floats(buffer_floats), storage(buffers * buffer_floats), blocks(buffers) {
    free_buffers.reserve(buffers);
    free_blocks.reserve(buffers);
    for (std::size_t i = buffers; i-- > 0;) {
      free_buffers.push_back(i);
      free_blocks.push_back(&blocks[i]);
    }
  }

  void release(std::size_t index) {
    const std::lock_guard lock(mutex);
    free_buffers.push_back(index);  // capacity reserved: no allocation
    if (on_release) on_release();
  }

  void* allocate_block(std::size_t bytes) {
    {
      const std::lock_guard lock(mutex);
      if (bytes <= kBlockBytes && !free_blocks.empty()) {
        Block* block = free_blocks.back();
        free_blocks.pop_back();
        return block;
      }
    }
    return ::operator new(bytes);
  }

  void deallocate_block(void* p) {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    if (address >= reinterpret_cast<std::uintptr_t>(blocks.data()) &&
        address < reinterpret_cast<std::uintptr_t>(blocks.data() + blocks.size())) {
      const std::lock_guard lock(mutex);
      free_blocks.push_back(static_cast<Block*>(p));
      return;
    }
    ::operator delete(p);
  }

  std::size_t floats;
  std::vector<float> storage;  // buffers x floats
  std::vector<Block> blocks;   // one control block per buffer
  std::mutex mutex;            // guards the free lists and on_release
  std::vector<std::size_t> free_buffers;
  std::vector<Block*> free_blocks;
  std::function<void()> on_release;
};

namespace {

/// Allocates shared_ptr control blocks from PoolState's free list.
template <class T>
struct BlockAllocator {
  using value_type = T;
  std::shared_ptr<PoolState> pool;
  explicit BlockAllocator(std::shared_ptr<PoolState> p) noexcept : pool(std::move(p)) {}
  template <class U>
  BlockAllocator(const BlockAllocator<U>& other) noexcept : pool(other.pool) {}  // NOLINT
  T* allocate(std::size_t n) { return static_cast<T*>(pool->allocate_block(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { pool->deallocate_block(p); }
  template <class U>
  bool operator==(const BlockAllocator<U>& other) const noexcept {
    return pool == other.pool;
  }
};

/// keep_alive's deleter: hands the buffer back.
struct ReturnToPool {
  std::shared_ptr<PoolState> pool;
  std::size_t index;
  void operator()(const void*) const { pool->release(index); }
};

}  // namespace

}  // namespace detail

PayloadPool::Lease::Lease(std::shared_ptr<detail::PoolState> pool, std::size_t index) noexcept
    : pool_(std::move(pool)), index_(index) {}

PayloadPool::Lease::Lease(Lease&& other) noexcept
    : pool_(std::move(other.pool_)), index_(other.index_) {}

PayloadPool::Lease& PayloadPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    if (pool_) pool_->release(index_);
    pool_ = std::move(other.pool_);
    index_ = other.index_;
  }
  return *this;
}

PayloadPool::Lease::~Lease() {
  if (pool_) pool_->release(index_);
}

std::span<float> PayloadPool::Lease::data() const noexcept {
  if (!pool_) return {};
  return {pool_->storage.data() + index_ * pool_->floats, pool_->floats};
}

net::Payload PayloadPool::Lease::payload(std::size_t floats) {
  GRADMESH_CHECK(pool_ != nullptr, "PayloadPool::Lease::payload on an invalid lease");
  GRADMESH_CHECK_LE(floats, pool_->floats, "payload larger than a pool buffer");
  const std::span<const float> values = data().first(floats);
  std::shared_ptr<detail::PoolState> pool = std::move(pool_);
  std::shared_ptr<const void> keep_alive(values.data(), detail::ReturnToPool{pool, index_},
                                         detail::BlockAllocator<char>(pool));
  return net::Payload::view(std::as_bytes(values), std::move(keep_alive));
}

PayloadPool::PayloadPool(std::size_t buffers, std::size_t floats) : buffers_(buffers) {
  GRADMESH_CHECK(buffers >= 1, "PayloadPool without buffers");
  GRADMESH_CHECK(floats >= 1, "PayloadPool of empty buffers");
  state_ = std::make_shared<detail::PoolState>(buffers, floats);
}

PayloadPool::~PayloadPool() { set_on_release({}); }

PayloadPool::Lease PayloadPool::acquire() {
  const std::lock_guard lock(state_->mutex);
  if (state_->free_buffers.empty()) return {};
  const std::size_t index = state_->free_buffers.back();
  state_->free_buffers.pop_back();
  return Lease(state_, index);
}

std::size_t PayloadPool::available() const {
  const std::lock_guard lock(state_->mutex);
  return state_->free_buffers.size();
}

void PayloadPool::set_on_release(std::function<void()> callback) {
  const std::lock_guard lock(state_->mutex);
  state_->on_release = std::move(callback);
}

}  // namespace gradmesh::sync::ako
