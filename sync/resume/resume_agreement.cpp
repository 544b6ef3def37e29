#include "sync/resume/resume_agreement.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace gradmesh::sync {

namespace {

std::string list_text(const std::vector<std::uint64_t>& iterations) {
  if (iterations.empty()) return "none";
  std::string out;
  for (const std::uint64_t i : iterations) out += (out.empty() ? "" : ", ") + std::to_string(i);
  return out;
}

/// The kinds of the agreement's lists on kResumeLane: the checkpoints' and join requests'
/// (exchange()), the evaluation's counts (exchange_evaluation()).
constexpr std::uint16_t kListKind = 0;
constexpr std::uint16_t kEvaluationKind = 1;
constexpr std::uint16_t kStatesKind = 2;
constexpr std::uint16_t kStatisticsKind = 3;

/// The lists of numbers in `payloads` (received bytes need not be aligned for u64).
std::vector<std::vector<std::uint64_t>> number_lists(const std::vector<net::Payload>& payloads) {
  std::vector<std::vector<std::uint64_t>> lists;
  lists.reserve(payloads.size());
  for (const net::Payload& p : payloads) {
    std::vector<std::uint64_t>& list = lists.emplace_back(p.size() / sizeof(std::uint64_t));
    if (!list.empty()) std::memcpy(list.data(), p.bytes().data(), p.size());
  }
  return lists;
}

}  // namespace

ResumeAgreement::ResumeAgreement(LaneRouter& router, double timeout_s)
    : router_(router),
      timeout_s_(timeout_s),
      lane_(lane_id(kResumeLane)),
      lists_(router_, lane_, kListKind),
      evaluations_(router_, lane_, kEvaluationKind),
      states_(router_, lane_, kStatesKind),
      statistics_(router_, lane_, kStatisticsKind) {
  GRADMESH_CHECK(timeout_s > 0, "ResumeAgreement: timeout " + std::to_string(timeout_s) + " s");
  router_.route(kResumeLane, [this](std::size_t from, net::Message&& message) {
    const std::size_t unit = message.kind >= kStatesKind ? sizeof(float) : sizeof(std::uint64_t);
    if (message.kind > kStatisticsKind || message.payload.size() % unit != 0) {
      router_.reject(from, lane_,
                     "kind " + std::to_string(message.kind) + " of " +
                         std::to_string(message.payload.size()) + " bytes, not a list of numbers");
      return;
    }
    collective::AllGather& gather = message.kind == kListKind         ? lists_
                                    : message.kind == kEvaluationKind ? evaluations_
                                    : message.kind == kStatesKind     ? states_
                                                                      : statistics_;
    gather.on_message(from, std::move(message));
  });
  router_.on_failure([this](const PeerError& error) {
    lists_.fail(error);
    evaluations_.fail(error);
    states_.fail(error);
    statistics_.fail(error);
  });
}

std::vector<std::vector<std::uint64_t>> ResumeAgreement::exchange(
    std::span<const std::uint64_t> valid, std::uint64_t round) {
  lists_.start(round, net::Payload::copy_of(std::as_bytes(valid)));
  const std::vector<net::Payload> payloads =
      lists_.wait(round, timeout_s_, [&](std::size_t) -> std::string {
        const std::string within = " within " + std::to_string(timeout_s_) + " s";
        return round == 0 ? "sent no list of its checkpoints" + within + " (is it resuming too?)"
                          : "sent no list of the join requests it has seen at the checkpoint "
                            "boundary of iteration " +
                                std::to_string(round) + within;
      });
  return number_lists(payloads);
}

std::vector<std::vector<std::uint64_t>> ResumeAgreement::exchange_evaluation(
    std::span<const std::uint64_t> counts, std::uint64_t round) {
  evaluations_.start(round, net::Payload::copy_of(std::as_bytes(counts)));
  return number_lists(evaluations_.wait(round, timeout_s_, [&](std::size_t) -> std::string {
    return "sent no figures of its share of the test set for evaluation " + std::to_string(round) +
           " within " + std::to_string(timeout_s_) + " s";
  }));
}

std::vector<std::vector<float>> ResumeAgreement::exchange_layer_states(
    std::span<const float> states, std::uint64_t round) {
  states_.start(round, net::Payload::copy_of(std::as_bytes(states)));
  const std::vector<net::Payload> payloads =
      states_.wait(round, timeout_s_, [&](std::size_t) -> std::string {
        return "sent no layer states (batch normalization's running statistics) for round " +
               std::to_string(round) + " within " + std::to_string(timeout_s_) + " s";
      });
  std::vector<std::vector<float>> out;
  out.reserve(payloads.size());
  for (const net::Payload& p : payloads) {  // received bytes need not be aligned for float
    std::vector<float>& values = out.emplace_back(p.size() / sizeof(float));
    if (!values.empty()) std::memcpy(values.data(), p.bytes().data(), p.size());
  }
  return out;
}

void ResumeAgreement::exchange_batch_statistics(std::span<const float> mine, std::uint64_t round,
                                                std::span<float> all) {
  statistics_.start(round, net::Payload::copy_of(std::as_bytes(mine)));
  const std::vector<net::Payload> payloads =
      statistics_.wait(round, timeout_s_, [&](std::size_t) -> std::string {
        return "sent no batch statistics (model.sync_batch_norm) for round " +
               std::to_string(round) + " within " + std::to_string(timeout_s_) + " s";
      });
  const std::size_t bytes = mine.size_bytes();
  GRADMESH_CHECK_EQ(all.size_bytes(), payloads.size() * bytes,
                    "exchange_batch_statistics: the gathered floats");
  for (std::size_t r = 0; r < payloads.size(); ++r) {
    GRADMESH_CHECK_EQ(payloads[r].size(), bytes,
                      "exchange_batch_statistics: rank " + std::to_string(r) +
                          "'s bytes (every node runs the same model)");
    if (bytes > 0) std::memcpy(all.data() + r * mine.size(), payloads[r].bytes().data(), bytes);
  }
}

std::uint64_t ResumeAgreement::newest_common(const std::vector<std::vector<std::uint64_t>>& lists) {
  GRADMESH_CHECK(!lists.empty(), "ResumeAgreement::newest_common: no lists");
  std::vector<std::uint64_t> common = lists[0];
  std::sort(common.begin(), common.end());
  for (std::size_t r = 1; r < lists.size(); ++r) {
    std::vector<std::uint64_t> other = lists[r];
    std::sort(other.begin(), other.end());
    std::vector<std::uint64_t> both;
    std::set_intersection(common.begin(), common.end(), other.begin(), other.end(),
                          std::back_inserter(both));
    common = std::move(both);
  }
  if (common.empty()) {
    std::string what;
    for (std::size_t r = 0; r < lists.size(); ++r) {
      what += (r ? "; rank " : "rank ") + std::to_string(r) + ": " + list_text(lists[r]);
    }
    throw CheckpointError("no checkpoint iteration is valid on every node (" + what + ")");
  }
  return common.back();
}

}  // namespace gradmesh::sync
