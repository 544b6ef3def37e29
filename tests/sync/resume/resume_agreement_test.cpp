// Tests for sync/resume/resume_agreement.h: the nodes of a resumed job agree on the newest
// checkpoint every one of them holds (peers as threads on the in-process transport).

#include "sync/resume/resume_agreement.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <thread>

#include "net/inproc/inproc_transport.h"

using namespace gradmesh;
using sync::ResumeAgreement;

namespace {

/// n nodes as threads on the in-process transport, each with its router and agreement, started;
/// closed when it goes.
struct Nodes {
  std::vector<std::unique_ptr<net::InProcTransport>> mesh;
  std::vector<std::unique_ptr<sync::LaneRouter>> channels;
  std::vector<std::unique_ptr<ResumeAgreement>> agreements;

  explicit Nodes(std::size_t n) : mesh(net::make_inproc_mesh(n, sync::lane_names())) {
    for (std::size_t r = 0; r < n; ++r) {
      channels.push_back(std::make_unique<sync::LaneRouter>(mesh[r].get(), r, n));
      agreements.push_back(std::make_unique<ResumeAgreement>(*channels[r], 20.0));
    }
    for (auto& t : mesh) t->start();
  }
  ~Nodes() {
    for (auto& t : mesh) t->close();
  }
};

}  // namespace

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
  Nodes nodes(n);
  auto& [mesh, channels, agreements] = nodes;
  const std::vector<std::vector<std::uint64_t>> valid{{24, 18}, {18, 12}, {24, 18, 12}};
  std::vector<std::future<std::vector<std::vector<std::uint64_t>>>> lists;
  for (std::size_t r = 0; r < n; ++r) {
    lists.push_back(
        std::async(std::launch::async, [&, r] { return agreements[r]->exchange(valid[r]); }));
  }
  for (std::size_t r = 0; r < n; ++r) {
    const auto all = lists[r].get();
    CHECK(all == valid);
    CHECK(ResumeAgreement::newest_common(all) == 18);
  }
}

TEST_CASE("exchanges in rounds: each round's lists, a late list of a finished round rejected",
          "[sync][resume]") {
  // A BSP job's checkpoint boundaries: round = the boundary's iteration; a node may be a round
  // ahead of another, its list kept until the other gets there.
  constexpr std::size_t n = 3;
  Nodes nodes(n);
  auto& [mesh, channels, agreements] = nodes;
  const std::vector<std::uint64_t> rounds{0, 100, 200};
  std::vector<std::future<std::vector<std::vector<std::vector<std::uint64_t>>>>> results;
  for (std::size_t r = 0; r < n; ++r) {
    results.push_back(std::async(std::launch::async, [&, r] {
      std::vector<std::vector<std::vector<std::uint64_t>>> out;
      for (const std::uint64_t round : rounds) {
        // Rank 1 sees a request in round 100 only; the others see none.
        std::vector<std::uint64_t> mine;
        if (round == 100 && r == 1) mine = {42};
        if (round == 0) mine = {r};
        out.push_back(agreements[r]->exchange(mine, round));
      }
      return out;
    }));
  }
  for (std::size_t r = 0; r < n; ++r) {
    const auto out = results[r].get();
    REQUIRE(out.size() == rounds.size());
    CHECK(out[0] == std::vector<std::vector<std::uint64_t>>{{0}, {1}, {2}});
    CHECK(out[1] == std::vector<std::vector<std::uint64_t>>{{}, {42}, {}});
    CHECK(out[2] == std::vector<std::vector<std::uint64_t>>{{}, {}, {}});
  }
  CHECK_THROWS_AS(agreements[0]->exchange({}, 200), gradmesh::ContractError);
  // A list of a finished round (a duplicate) is rejected and counted, never kept.
  const std::uint64_t before = channels[0]->rejected();
  mesh[1]->send(0, net::Message{sync::lane_id(sync::kResumeLane), 0, 0, 100, {}, 0});
  for (int i = 0; i < 200 && channels[0]->rejected() == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(channels[0]->rejected() == before + 1);
  // Lists of many rounds to come (a misbehaving peer's) are rejected past a few, never kept.
  for (std::uint64_t round = 1000; round < 1010; ++round) {
    mesh[1]->send(0, net::Message{sync::lane_id(sync::kResumeLane), 0, 0, round, {}, 0});
  }
  for (int i = 0; i < 200 && channels[0]->rejected() < before + 7; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(channels[0]->rejected() == before + 1 + 6);  // 4 rounds kept, 6 rejected
}

TEST_CASE("the evaluation's figures and the layer states go round in gathers of their own",
          "[sync][resume]") {
  constexpr std::size_t n = 3;
  Nodes nodes(n);
  auto& agreements = nodes.agreements;
  std::vector<std::future<std::vector<std::vector<std::uint64_t>>>> figures;
  std::vector<std::future<std::vector<std::vector<float>>>> states;
  for (std::size_t r = 0; r < n; ++r) {
    figures.push_back(std::async(std::launch::async, [&, r] {
      // Round 1 of the evaluation's gather while round 1 of the states' runs beside it.
      const std::vector<std::uint64_t> mine{r, 10 * r};
      return agreements[r]->exchange_evaluation(mine, 1);
    }));
    states.push_back(std::async(std::launch::async, [&, r] {
      const std::vector<float> mine{0.5f * static_cast<float>(r), -1.0f};
      return agreements[r]->exchange_layer_states(mine, 1);
    }));
  }
  for (std::size_t r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(figures[r].get() == std::vector<std::vector<std::uint64_t>>{{0, 0}, {1, 10}, {2, 20}});
    CHECK(states[r].get() ==
          std::vector<std::vector<float>>{{0.0f, -1.0f}, {0.5f, -1.0f}, {1.0f, -1.0f}});
  }
}
