#pragma once
// Checks shared by the tests of schemes whose wire rounds (16-bit SFB factors, 16-bit all-reduce
// segments; issue 28). Header-only: it uses Catch's CHECK, so test sources include it, not the
// support library.

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/sync/support/inproc_cluster.h"

namespace gradmesh::testing {

/// After the same iterations of `lossy` (the rounding scheme on lane `lane`) and `plain` (the
/// float scheme on `plain_lane`): every replica of `lossy` holds the same bits and no node rejected
/// a message; its parameters differ from `reference` (the union batches' SGD) by more than 0 and
/// less than `bound`; it sent nothing on `plain_lane` and under 0.6 of `plain`'s bytes on `lane`
/// (2 bytes a float and the scales, against 4 a float).
inline void check_lossy_run(InProcCluster& lossy, InProcCluster& plain,
                            const std::vector<float>& reference, double bound,
                            const std::string& lane, const std::string& plain_lane) {
  const auto all = replicas(lossy);
  for (std::size_t r = 0; r < lossy.size(); ++r) {
    CHECK(all[r] == all[0]);
    CHECK(lossy.node(r).stage().rejected_messages() == 0);
  }
  const double difference = max_abs_difference(all[0], reference);
  CHECK(difference > 0);
  CHECK(difference < bound);
  const net::Counters counters = lossy.transport(0).counters();
  const net::Counters plain_counters = plain.transport(0).counters();
  CHECK(counters.bytes_sent_by_lane.at(plain_lane) == 0);
  CHECK(counters.bytes_sent_by_lane.at(lane) <
        0.6 * plain_counters.bytes_sent_by_lane.at(plain_lane));
}

}  // namespace gradmesh::testing
