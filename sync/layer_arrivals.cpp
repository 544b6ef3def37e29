#include "sync/layer_arrivals.h"

#include "engine/error.h"

namespace gradmesh::sync {

LayerArrivals::LayerArrivals(std::size_t layers)
    : slots_(std::make_unique<Slot[]>(layers)), layers_(layers) {}

void LayerArrivals::expect(std::size_t layer, std::uint64_t round, std::size_t parts) {
  GRADMESH_CHECK_LT(layer, layers_, "LayerArrivals::expect: no such layer");
  Slot& slot = slots_[layer];
  std::lock_guard lock(slot.mutex);
  bool failed = false;
  {
    std::lock_guard error_lock(error_mutex_);
    failed = error_ != nullptr;
  }
  // After a failure a round may never complete: a new one simply replaces it (awaits fail anyway).
  GRADMESH_CHECK(failed || !slot.open || slot.remaining == 0,
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
  engine::Completion done;
  {
    std::lock_guard lock(slot.mutex);
    if (!slot.open || slot.round != round || slot.remaining == 0) return false;
    if (--slot.remaining == 0) done = std::exchange(slot.waiting, engine::Completion{});
  }
  done.complete();  // outside the lock: it may schedule successors
  return true;
}

void LayerArrivals::await(std::size_t layer, std::uint64_t round, engine::Completion done) {
  GRADMESH_CHECK_LT(layer, layers_, "LayerArrivals::await: no such layer");
  Slot& slot = slots_[layer];
  std::exception_ptr error;
  {
    std::lock_guard lock(slot.mutex);
    {
      // Read under the slot's lock: fail_all() sets the error before it visits the slots, so a
      // completion parked here after that read is still found and failed by it.
      std::lock_guard error_lock(error_mutex_);
      error = error_;
    }
    if (!error) {
      GRADMESH_CHECK(slot.open && slot.round == round,
                     "await of layer " + std::to_string(layer) + " round " +
                         std::to_string(round) + " before expect()");
      if (slot.remaining != 0) {
        slot.waiting = std::move(done);
        return;
      }
    }
  }
  if (error) {
    done.fail(error);
  } else {
    done.complete();
  }
}

void LayerArrivals::fail_all(std::exception_ptr error) {
  {
    std::lock_guard lock(error_mutex_);
    if (!error_) error_ = error;
    error = error_;
  }
  for (std::size_t l = 0; l < layers_; ++l) {
    engine::Completion done;
    {
      std::lock_guard lock(slots_[l].mutex);
      done = std::exchange(slots_[l].waiting, engine::Completion{});
    }
    done.fail(error);
  }
}

}  // namespace gradmesh::sync
