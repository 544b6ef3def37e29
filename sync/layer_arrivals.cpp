#include "sync/layer_arrivals.h"

#include "engine/error.h"

namespace gradmesh::sync {

LayerArrivals::LayerArrivals(std::size_t layers)
    : slots_(std::make_unique<Slot[]>(layers)), layers_(layers) {}

void LayerArrivals::expect(std::size_t layer, std::uint64_t round, std::size_t parts) {
  GRADMESH_CHECK_LT(layer, layers_, "LayerArrivals::expect: no such layer");
  Slot& slot = slots_[layer];
  std::lock_guard lock(slot.mutex);
  // After a failure a round may never complete: a new one simply replaces it (awaits fail anyway).
  GRADMESH_CHECK(failed() || !slot.open || slot.remaining == 0,
                 "layer " + std::to_string(layer) + " opened round " + std::to_string(round) +
                     " while round " + std::to_string(slot.round) + " still misses " +
                     std::to_string(slot.remaining) + " parts");
  slot.round = round;
  slot.remaining = parts;
  slot.open = true;
}

bool LayerArrivals::arrive(std::size_t layer, std::uint64_t round) {
  if (layer >= layers_) return false;
  Slot& slot = slots_[layer];
  collective::Settlement done;
  {
    std::lock_guard lock(slot.mutex);
    if (!slot.open || slot.round != round || slot.remaining == 0) return false;
    if (--slot.remaining == 0) done = slot.done.release();
  }
  std::move(done).run();  // outside the lock: it may schedule successors
  return true;
}

void LayerArrivals::await(std::size_t layer, std::uint64_t round, engine::Completion done) {
  GRADMESH_CHECK_LT(layer, layers_, "LayerArrivals::await: no such layer");
  Slot& slot = slots_[layer];
  collective::Settlement settled;
  {
    std::lock_guard lock(slot.mutex);
    // Once fail_all() began, the slot fails the task or parks it: fail_all() sets the error
    // before it visits the slots, so it fails a task parked here.
    GRADMESH_CHECK(failed() || (slot.open && slot.round == round),
                   "await of layer " + std::to_string(layer) + " round " + std::to_string(round) +
                       " before expect()");
    settled = slot.done.wait(std::move(done), slot.remaining == 0);
  }
  std::move(settled).run();
}

bool LayerArrivals::failed() {
  std::lock_guard error_lock(error_mutex_);
  return error_ != nullptr;
}

void LayerArrivals::fail_all(std::exception_ptr error) {
  {
    std::lock_guard lock(error_mutex_);
    if (!error_) error_ = error;
    error = error_;
  }
  for (std::size_t l = 0; l < layers_; ++l) {
    collective::Settlement failed;
    {
      std::lock_guard lock(slots_[l].mutex);
      failed = slots_[l].done.fail(error);
    }
    std::move(failed).run();
  }
}

}  // namespace gradmesh::sync
