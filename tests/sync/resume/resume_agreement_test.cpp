// Tests for sync/resume/resume_agreement.h: the nodes of a resumed job agree on the newest
// checkpoint every one of them holds (peers as threads on the in-process transport).

#include "sync/resume/resume_agreement.h"

#include <catch2/catch.hpp>
#include <future>

#include "net/inproc/inproc_transport.h"

using namespace gradmesh;
using sync::ResumeAgreement;

TEST_CASE("the newest iteration common to every node is chosen", "[sync][resume]") {
  CHECK(ResumeAgreement::newest_common({{40, 30}, {30, 40}, {40, 30, 20}}) == 40);
  // Rank 1's newest (40) was torn: 30 is the newest all hold.
  CHECK(ResumeAgreement::newest_common({{40, 30}, {30}, {40, 30}}) == 30);
  CHECK(ResumeAgreement::newest_common({{7}}) == 7);
  CHECK_THROWS_WITH(ResumeAgreement::newest_common({{40}, {30}, {}}),
                    Catch::Contains("no checkpoint iteration is valid on every node") &&
                        Catch::Contains("rank 0: 40; rank 1: 30; rank 2: none"));
}

TEST_CASE("three nodes exchange their checkpoint lists and agree", "[sync][resume]") {
  constexpr std::size_t n = 3;
  auto mesh = net::make_inproc_mesh(n, sync::stage_names());
  std::vector<std::unique_ptr<sync::Channel>> channels;
  std::vector<std::unique_ptr<ResumeAgreement>> agreements;
  for (std::size_t r = 0; r < n; ++r) {
    channels.push_back(std::make_unique<sync::Channel>(mesh[r].get(), r, n));
    agreements.push_back(std::make_unique<ResumeAgreement>(*channels[r], 20.0));
  }
  for (auto& t : mesh) t->start();
  const std::vector<std::vector<std::uint64_t>> valid{{24, 18}, {18, 12}, {24, 18, 12}};
  std::vector<std::future<std::vector<std::vector<std::uint64_t>>>> lists;
  for (std::size_t r = 0; r < n; ++r) {
    lists.push_back(std::async(std::launch::async, [&, r] { return agreements[r]->exchange(valid[r]); }));
  }
  for (std::size_t r = 0; r < n; ++r) {
    const auto all = lists[r].get();
    CHECK(all == valid);
    CHECK(ResumeAgreement::newest_common(all) == 18);
  }
  for (auto& t : mesh) t->close();
}
