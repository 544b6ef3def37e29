// Tests for apps/recovery/join_admission.h: which restarted nodes a view takes back at a
// checkpoint boundary (one node here: the exchange of the lists is ResumeAgreement's, tested in
// tests/sync/resume/; the multi-node rejoin in tests/apps/node/).

#include "apps/recovery/join_admission.h"

#include <catch2/catch.hpp>

#include "recovery_fixture.h"
#include "sync/lane_router.h"

using namespace gradmesh::app;
using gradmesh::app::testing::TempDir;

TEST_CASE("a request from an address outside the view is admitted, a live member's refused",
          "[recovery][rejoin]") {
  TempDir dir("admission");
  gradmesh::sync::LaneRouter router(nullptr, 0, 1);
  gradmesh::sync::ResumeAgreement agreement(router, 5.0);
  const std::vector<std::string> members{"127.0.0.1:9000"};
  CHECK(admit_join_requests(dir.path, members, 0, 0, 10, false, agreement).empty());  // none

  const JoinRequest joiner = file_join_request(dir.path, "127.0.0.1:9001");
  const JoinRequest impostor = file_join_request(dir.path, "127.0.0.1:9000");
  const auto admitted = admit_join_requests(dir.path, members, 0, 3, 20, false, agreement);
  CHECK(admitted == std::vector<JoinRequest>{joiner});
  CHECK_FALSE(find_join_refusal(dir.path, joiner).has_value());
  const auto refusal = find_join_refusal(dir.path, impostor);
  REQUIRE(refusal.has_value());
  CHECK_THAT(*refusal, Catch::Contains("rank 0 of view 3") && Catch::Contains("is live"));
}

TEST_CASE("at the job's last iteration every joiner is refused in writing", "[recovery][rejoin]") {
  TempDir dir("admission-last");
  gradmesh::sync::LaneRouter router(nullptr, 0, 1);
  gradmesh::sync::ResumeAgreement agreement(router, 5.0);
  const JoinRequest joiner = file_join_request(dir.path, "127.0.0.1:9001");
  CHECK(admit_join_requests(dir.path, {"127.0.0.1:9000"}, 0, 0, 40, true, agreement).empty());
  const auto refusal = find_join_refusal(dir.path, joiner);
  REQUIRE(refusal.has_value());
  CHECK_THAT(*refusal, Catch::Contains("ended at iteration 40"));
}
