// AkoStage: received partitions and full rounds, the staging delta, peer failures.
#include "sync/ako/ako_internal.h"

#include <cstring>

namespace gradmesh::sync {

using namespace ako_internal;

// ====================================================================== receiving

void AkoStage::on_message(std::size_t from, net::Message&& message) {
  if (!constructed_.load(std::memory_order_acquire)) {
    router_.reject(from, message.lane, "a message before this node's ako stage was built");
    return;
  }
  switch (static_cast<ako::Kind>(message.kind)) {
    case ako::Kind::kProfile:
      if (message.payload.size() != kProfileDoubles * sizeof(double)) {
        reject(from, "a profile of " + std::to_string(message.payload.size()) +
                         " bytes (expected " + std::to_string(kProfileDoubles * sizeof(double)) +
                         ")");
        return;
      }
      if (!auto_partitions_ || message.key >= kPlans) {
        reject(from,
               "an unexpected gradient-rate profile (plan " + std::to_string(message.key) + ")");
        return;
      }
      record_profile(from, static_cast<std::size_t>(message.key), message.payload.as<double>());
      return;
    case ako::Kind::kDone: {
      // Sent after a peer's last round (per-connection order: all its partitions came first).
      const std::string refused = end_.done(from);
      if (!refused.empty()) reject(from, refused);
      return;
    }
    case ako::Kind::kPartition: {
      // At the schedule's rate now (tasks/optim/lr_schedule.h).
      const std::string refused = receiver_.partition(from, message, ctx_.optimizer.lr());
      if (!refused.empty()) reject(from, refused);
      return;
    }
    case ako::Kind::kFullRound: {
      const std::string refused = receiver_.full_round(from, message, ctx_.optimizer.lr());
      if (!refused.empty()) reject(from, refused);
      return;
    }
    case ako::Kind::kReplica: {
      const std::string refused = end_.replica(from, std::move(message.payload));
      if (!refused.empty()) reject(from, refused);
      return;
    }
    case ako::Kind::kJoinRequest: {
      if (!message.payload.empty() || message.key > 1) {
        reject(from, "a malformed join request");
        return;
      }
      take_back(from);  // its lanes are routed: rounds to it may go again
      if (message.key == 0) return;
      joins_.request(from);
      spdlog::info(
          "ako: rank {} asks for this node's replica to rejoin; it goes at this node's "
          "next iteration boundary",
          from);
      return;
    }
    case ako::Kind::kJoinState:
      record_join_state(from, std::move(message));
      return;
    default:
      break;
  }
  reject(from, "unknown message kind " + std::to_string(message.kind));
}

void AkoStage::on_failure(const PeerError& error) {
  const std::size_t peer = error.rank();
  if (peer >= ctx_.nodes || peer == ctx_.rank) {
    spdlog::error("ako: a failure report for rank {} ignored: {}", peer, error.what());
    return;
  }
  const std::optional<ako::Membership::Dropped> dropped = membership_.drop(peer);
  if (!dropped) return;  // reported already
  failed_.store(true, std::memory_order_release);
  const std::size_t live = dropped->live;
  if (dropped->quorum_holds) {
    spdlog::warn(
        "ako: {}; dropped from the staleness clocks, going on with {} of {} nodes (Ako "
        "SoCC'16 sec. 4.3)",
        error.what(), live, ctx_.nodes);
  } else {
    cut_off(error);  // fails the gates before the drop below could open one
  }
  clocks_.drop(peer);  // a gate waiting for its clock opens
  // The end-of-job mean needs every node's replica: it can no longer complete.
  if (average_) average_->fail_all(std::make_exception_ptr(error));
  for (std::size_t plan = 0; plan < kPlans; ++plan) try_agree(plan);  // its gamma may never come
  end_.notify();  // finish() checks whether it waits on this peer
  joins_.wake();  // join() checks whether it waits on this peer
}

void AkoStage::cut_off(const PeerError& error) {
  const std::optional<std::string> why =
      membership_.cut_off([this](std::size_t r) { return router_.address(r); }, error.what());
  if (!why) return;  // cut off already
  spdlog::error("ako: {}", *why);
  clocks_.fail_all(std::make_exception_ptr(Error(*why)));
}

void AkoStage::check_quorum() const { membership_.check(); }

void AkoStage::reject(std::size_t from, const std::string& why) {
  router_.reject(from, partition_lane_, why);
}

}  // namespace gradmesh::sync
