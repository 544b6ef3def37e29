#include "sync/poseidon/sfb_layer.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/error.h"
#include "sync/poseidon/sf_rebuild.h"
#include "tasks/cpu/cpu_backend.h"

namespace gradmesh::sync {

SfbLayer::SfbLayer(std::size_t m, std::size_t n, std::size_t k, std::size_t nodes, std::size_t rank,
                   tasks::Backend* device, const collective::SegmentCodec* wire)
    : m_(m), n_(n), k_(k), nodes_(nodes), rank_(rank), device_(device), wire_(wire) {
  for (Round& r : rounds_) r.factors.resize(nodes);
  for (auto& buffer : send_) buffer.resize(factor_bytes());
  tasks::Backend& staging = device != nullptr ? *device : tasks::cpu::host_backend();
  u_all_ = staging.allocate<float>(nodes * k * m, tasks::MemoryKind::kHostStaging);
  v_all_ = staging.allocate<float>(nodes * k * n, tasks::MemoryKind::kHostStaging);
  if (device != nullptr) {
    u_device_ = device->allocate<float>(nodes * k * m);
    v_device_ = device->allocate<float>(nodes * k * n);
  }
}

std::size_t SfbLayer::factor_bytes() const noexcept {
  if (wire_ == nullptr) return k_ * (m_ + n_) * sizeof(float);
  return wire_->encoded_bytes(k_ * m_) + wire_->encoded_bytes(k_ * n_);
}

net::Payload SfbLayer::pack(std::uint64_t round, std::span<const float> u,
                            std::span<const float> v) {
  GRADMESH_CHECK_EQ(u.size(), k_ * m_, "U must be K x M");
  GRADMESH_CHECK_EQ(v.size(), k_ * n_, "V must be K x N");
  std::vector<std::byte>& buffer = send_[round % 2];
  if (wire_ == nullptr) {
    std::memcpy(buffer.data(), u.data(), u.size_bytes());
    std::memcpy(buffer.data() + u.size_bytes(), v.data(), v.size_bytes());
  } else {
    wire_->encode(u, buffer.data(), {});
    wire_->encode(v, buffer.data() + wire_->encoded_bytes(u.size()), {});
  }
  net::Payload payload = net::Payload::view(std::span<const std::byte>(buffer));
  std::string why;
  GRADMESH_CHECK(store(rank_, round, payload, &why), why);
  return payload;
}

bool SfbLayer::store(std::size_t from, std::uint64_t round, net::Payload factors,
                     std::string* why) {
  if (factors.size() != factor_bytes()) {
    *why = "factors of " + std::to_string(factors.size()) + " bytes, expected " +
           std::to_string(factor_bytes());
    return false;
  }
  if (from >= nodes_) {
    *why = "sender rank " + std::to_string(from) + " out of range";
    return false;
  }
  collective::Settlement done;
  {
    std::lock_guard lock(mutex_);
    if (round != current_ && round != current_ + 1) {
      *why = "factors for round " + std::to_string(round) + " while in round " +
             std::to_string(current_);
      return false;
    }
    Round& r = rounds_[round % 2];
    if (!r.factors[from].empty()) {
      *why = "duplicate factors from rank " + std::to_string(from) + " in round " +
             std::to_string(round);
      return false;
    }
    r.factors[from] = std::move(factors);
    if (++r.received == nodes_) done = r.done.release();
  }
  std::move(done).run();
  return true;
}

void SfbLayer::await(std::uint64_t round, engine::Completion done) {
  collective::Settlement settled;
  {
    std::lock_guard lock(mutex_);
    Round& r = rounds_[round % 2];
    if (!r.done.failed()) {
      GRADMESH_CHECK_EQ(round, current_, "await of an SFB round that is not the current one");
    }
    settled = r.done.wait(std::move(done), r.received == nodes_);
  }
  std::move(settled).run();
}

void SfbLayer::fail_all(std::exception_ptr error) {
  std::array<collective::Settlement, 2> failed;
  {
    std::lock_guard lock(mutex_);
    failed[0] = rounds_[0].done.fail(std::move(error));
    failed[1] = rounds_[1].done.fail(rounds_[0].done.error());  // the same (first) error
  }
  for (collective::Settlement& s : failed) std::move(s).run();
}

SfbLayer::Round& SfbLayer::stack(std::uint64_t round) {
  Round* r = nullptr;
  {
    std::lock_guard lock(mutex_);
    GRADMESH_CHECK_EQ(round, current_, "rebuild of an SFB round that is not the current one");
    r = &rounds_[round % 2];
    GRADMESH_CHECK_EQ(r->received, nodes_, "rebuild before every node's factors arrived");
  }
  // The round's slots are complete and only this task touches them until received is reset.
  // Sizes were checked by store(); bytes are read with memcpy, whatever their alignment.
  for (std::size_t p = 0; p < nodes_; ++p) {
    const std::byte* bytes = r->factors[p].bytes().data();
    const std::span<float> u(u_all_.data() + p * k_ * m_, k_ * m_);
    const std::span<float> v(v_all_.data() + p * k_ * n_, k_ * n_);
    if (wire_ == nullptr) {
      std::memcpy(u.data(), bytes, u.size_bytes());
      std::memcpy(v.data(), bytes + u.size_bytes(), v.size_bytes());
      continue;
    }
    wire_->decode(bytes, u);
    wire_->decode(bytes + wire_->encoded_bytes(u.size()), v);
  }
  return *r;
}

void SfbLayer::release(Round& r) {
  std::lock_guard lock(mutex_);
  for (net::Payload& p : r.factors) p = net::Payload{};
  r.received = 0;
  ++current_;
}

void SfbLayer::rebuild(std::uint64_t round, std::span<float> dw, std::span<float> db) {
  Round& r = stack(round);
  rebuild_dense_gradient(u_all_.span(), v_all_.span(), nodes_ * k_, m_, n_,
                         1.0f / static_cast<float>(nodes_), dw, db);
  release(r);
}

void SfbLayer::rebuild_on_device(std::uint64_t round, std::span<float> dw, std::span<float> db) {
  GRADMESH_CHECK(device_ != nullptr, "rebuild_on_device of an SFB layer built without a device");
  // The previous round's asynchronous upload reads the staging stack that stack() rewrites.
  device_->synchronize();
  Round& r = stack(round);
  device_->copy_to_device(u_device_.data(), u_all_.data(), u_all_.size() * sizeof(float));
  device_->copy_to_device(v_device_.data(), v_all_.data(), v_all_.size() * sizeof(float));
  rebuild_dense_gradient(*device_, u_device_.span(), v_device_.span(), nodes_ * k_, m_, n_,
                         1.0f / static_cast<float>(nodes_), dw, db);
  release(r);  // the payloads were copied into the staging stack
}

}  // namespace gradmesh::sync
