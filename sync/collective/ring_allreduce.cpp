#include "sync/collective/ring_allreduce.h"

#include <algorithm>
#include <string>

#include "engine/error.h"

namespace gradmesh::sync::collective {

namespace {
constexpr unsigned kBucketShift = 32;  // key = bucket << 32 | step
}  // namespace

RingAllReduce::RingAllReduce(LaneRouter& router, LaneId lane, std::uint32_t bucket,
                             std::size_t floats, std::uint32_t priority, const SegmentCodec* wire)
    : router_(router),
      lane_(lane),
      bucket_(bucket),
      priority_(priority),
      floats_(floats),
      nodes_(router.nodes()),
      rank_(router.rank()),
      left_((rank_ + nodes_ - 1) % nodes_),
      right_((rank_ + 1) % nodes_),
      wire_(wire) {
  GRADMESH_CHECK_GT(nodes_, std::size_t{0}, "RingAllReduce needs a rank");
  if (wire_ != nullptr) slot_bytes_ = wire_bytes(0);  // segment 0 is largest
  for (std::uint64_t parity = 0; parity < 2; ++parity) {
    reset(rounds_[parity], parity);
    results_[parity].assign(floats_, 0.0f);
    encoded_[parity].assign(nodes_ * slot_bytes_, std::byte{0});
  }
}

std::size_t RingAllReduce::wire_bytes(std::size_t j) const noexcept {
  if (wire_ == nullptr) return segment_size(j) * sizeof(float);
  return wire_->encoded_bytes(segment_size(j));
}

net::Payload RingAllReduce::wire_payload(std::uint64_t round, std::size_t slot,
                                         std::span<const float> values, std::span<float> decoded) {
  if (wire_ == nullptr) {
    if (!decoded.empty()) std::copy(values.begin(), values.end(), decoded.begin());
    return net::Payload::view(std::as_bytes(values));
  }
  std::byte* at = encoded_[round % 2].data() + slot * slot_bytes_;
  wire_->encode(values, at, decoded);
  return net::Payload::view(std::span<const std::byte>(at, wire_->encoded_bytes(values.size())));
}

void RingAllReduce::reset(Round& r, std::uint64_t round) const {
  // In place: the vectors keep their memory, so a round allocates nothing.
  r.round = round;
  r.started = false;
  r.input = {};
  r.early.resize(nodes_);
  for (net::Payload& p : r.early) p = net::Payload{};
  r.arrived_early.assign(nodes_, 0);
  r.have_step.assign(nodes_, 0);
  r.have_gather.assign(nodes_, 0);
  r.segments_done = 0;
}

std::size_t RingAllReduce::segment_begin(std::size_t j) const noexcept {
  const std::size_t base = floats_ / nodes_, extra = floats_ % nodes_;
  return j * base + std::min(j, extra);
}

std::size_t RingAllReduce::segment_size(std::size_t j) const noexcept {
  return floats_ / nodes_ + (j < floats_ % nodes_ ? 1 : 0);
}

std::size_t RingAllReduce::mod(std::int64_t value) const noexcept {
  const auto n = static_cast<std::int64_t>(nodes_);
  return static_cast<std::size_t>(((value % n) + n) % n);
}

RingAllReduce::Round* RingAllReduce::round_for(std::uint64_t round) {
  if (round != current_ && round != current_ + 1) return nullptr;
  Round& r = rounds_[round % 2];
  return r.round == round ? &r : nullptr;
}

void RingAllReduce::send(std::uint64_t round, RingKind kind, std::size_t step,
                         net::Payload payload) {
  const net::Message message{lane_,
                             static_cast<std::uint16_t>(kind),
                             (std::uint64_t{bucket_} << kBucketShift) | step,
                             round,
                             std::move(payload),
                             priority_};
  if (auto error = router_.send(right_, message)) throw *error;
}

void RingAllReduce::start(std::uint64_t round, std::span<float> input) {
  GRADMESH_CHECK_EQ(input.size(), floats_, "RingAllReduce::start: input size");
  Settlement done;
  {
    const std::lock_guard lock(mutex_);
    if (done_[0].failed()) std::rethrow_exception(done_[0].error());
    Round* r = round_for(round);
    GRADMESH_CHECK(r != nullptr && round == current_ && !r->started,
                   "RingAllReduce::start of round " + std::to_string(round) + " while at round " +
                       std::to_string(current_));
    r->started = true;
    r->input = input;
    if (nodes_ == 1) {  // the sum of one rank's input
      std::copy(input.begin(), input.end(), result_buffer(round).begin());
      done = finish_segment(*r);
    } else {
      send(round, RingKind::kReduceScatter, 0,
           wire_payload(round, 0, input.subspan(segment_begin(rank_), segment_size(rank_))));
      // Steps that arrived before this rank started, in order (one neighbour: FIFO).
      for (std::size_t step = 0; step + 1 < nodes_ && r->arrived_early[step]; ++step) {
        const net::Payload payload = std::move(r->early[step]);
        done = reduce_step(*r, step, payload);
      }
    }
  }
  std::move(done).run();
}

Settlement RingAllReduce::reduce_step(Round& r, std::size_t step, const net::Payload& arrived) {
  r.have_step[step] = 1;
  const std::size_t j = mod(static_cast<std::int64_t>(rank_) - static_cast<std::int64_t>(step) - 1);
  const std::span<float> segment = r.input.subspan(segment_begin(j), segment_size(j));
  if (wire_ == nullptr) {
    const std::span<const float> values = arrived.as<float>();
    for (std::size_t i = 0; i < segment.size(); ++i) segment[i] += values[i];
  } else {
    wire_->decode_add(arrived.bytes().data(), segment);
  }
  if (step + 2 < nodes_) {
    send(r.round, RingKind::kReduceScatter, step + 1, wire_payload(r.round, step + 1, segment));
    return {};
  }
  // The last reduce-scatter step: segment j = rank + 1 holds the full sum. Publish (as the others
  // will decode it) and pass on.
  const std::span<float> result =
      std::span<float>(result_buffer(r.round)).subspan(segment_begin(j), segment.size());
  if (wire_ == nullptr) {
    std::copy(segment.begin(), segment.end(), result.begin());
    send(r.round, RingKind::kAllGather, 0, wire_payload(r.round, 0, result));
  } else {
    send(r.round, RingKind::kAllGather, 0, wire_payload(r.round, nodes_ - 1, segment, result));
  }
  return finish_segment(r);
}

Settlement RingAllReduce::gather_step(Round& r, std::size_t step, net::Payload arrived) {
  r.have_gather[step] = 1;
  const std::size_t j = mod(static_cast<std::int64_t>(rank_) - static_cast<std::int64_t>(step));
  const std::span<float> result =
      std::span<float>(result_buffer(r.round)).subspan(segment_begin(j), segment_size(j));
  if (wire_ == nullptr) {
    const std::span<const float> values = arrived.as<float>();
    std::copy(values.begin(), values.end(), result.begin());
    if (step + 2 < nodes_) {
      send(r.round, RingKind::kAllGather, step + 1, wire_payload(r.round, 0, result));
    }
  } else {
    wire_->decode(arrived.bytes().data(), result);
    // The bytes as received: every rank decodes the owner's one encoding.
    if (step + 2 < nodes_) send(r.round, RingKind::kAllGather, step + 1, std::move(arrived));
  }
  return finish_segment(r);
}

Settlement RingAllReduce::finish_segment(Round& r) {
  if (++r.segments_done < nodes_) return {};
  // Round complete: the slot opens for round + 2, the result stays until then.
  Settlement done = done_[r.round % 2].release();
  current_ = r.round + 1;
  reset(r, r.round + 2);
  return done;
}

void RingAllReduce::await(std::uint64_t round, engine::Completion done) {
  Settlement settled;
  {
    const std::lock_guard lock(mutex_);
    const bool complete = round < current_;
    GRADMESH_CHECK(complete || round_for(round) != nullptr,
                   "RingAllReduce::await of round " + std::to_string(round) + " while at round " +
                       std::to_string(current_));
    settled = done_[round % 2].wait(std::move(done), complete);
  }
  std::move(settled).run();
}

std::span<const float> RingAllReduce::result(std::uint64_t round) const {
  return results_[round % 2];
}

void RingAllReduce::on_message(std::size_t from, net::Message&& message) {
  const std::size_t step = message.key & ((std::uint64_t{1} << kBucketShift) - 1);
  const auto kind = static_cast<RingKind>(message.kind);
  Settlement done;
  try {
    const std::lock_guard lock(mutex_);
    if (from != left_) {
      return reject(from, "bucket " + std::to_string(bucket_) + " from rank " +
                              std::to_string(from) + ", not the left neighbour " +
                              std::to_string(left_));
    }
    if (step + 1 >= nodes_) return reject(from, "step " + std::to_string(step) + " out of range");
    Round* r = round_for(message.round);
    if (r == nullptr) {
      return reject(from, "bucket " + std::to_string(bucket_) + " round " +
                              std::to_string(message.round) + " while at round " +
                              std::to_string(current_));
    }
    const std::size_t j =
        kind == RingKind::kReduceScatter
            ? mod(static_cast<std::int64_t>(rank_) - static_cast<std::int64_t>(step) - 1)
            : mod(static_cast<std::int64_t>(rank_) - static_cast<std::int64_t>(step));
    if (message.payload.size() != wire_bytes(j)) {
      return reject(from, "segment of " + std::to_string(message.payload.size()) +
                              " bytes, expected " + std::to_string(wire_bytes(j)));
    }
    if (kind == RingKind::kReduceScatter) {
      if (r->have_step[step] || r->arrived_early[step]) {
        return reject(from, "duplicate reduce-scatter step " + std::to_string(step));
      }
      if (!r->started) {
        // A peer already in this round: keep the bytes (received, so owned) until start().
        r->early[step] = std::move(message.payload);
        r->arrived_early[step] = 1;
        return;
      }
      done = reduce_step(*r, step, message.payload);
    } else if (kind == RingKind::kAllGather) {
      if (!r->started || r->have_gather[step]) {
        return reject(from, "all-gather step " + std::to_string(step) +
                                " duplicate or before this rank started");
      }
      done = gather_step(*r, step, std::move(message.payload));
    } else {
      return reject(from, "unknown kind " + std::to_string(message.kind));
    }
  } catch (const PeerError&) {
    return;  // the right neighbour failed: the failure handler fails the round
  }
  std::move(done).run();
}

void RingAllReduce::fail_all(std::exception_ptr error) {
  Settlement settled[2];
  {
    const std::lock_guard lock(mutex_);
    settled[0] = done_[0].fail(std::move(error));
    settled[1] = done_[1].fail(done_[0].error());  // the same (first) error
  }
  for (Settlement& s : settled) std::move(s).run();
}

void RingAllReduce::reject(std::size_t from, const std::string& why) {
  router_.reject(from, lane_, why);
}

}  // namespace gradmesh::sync::collective
