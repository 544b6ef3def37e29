// gradmesh-launch's console (apps/launch/console.h) on recorded node output.

#include "apps/launch/console.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

using gradmesh::app::ConsoleMerger;
using gradmesh::app::rank_list;

namespace {

/// Everything `lines` (rank, line, time) make the merger print, then its flush at the end.
std::string run(ConsoleMerger& merger,
                const std::vector<std::tuple<std::size_t, std::string, double>>& lines,
                double end) {
  std::string out;
  for (const auto& [rank, line, now] : lines) {
    for (const std::string& printed : merger.add(rank, line, now)) out += printed;
  }
  for (const std::string& printed : merger.flush(end, true)) out += printed;
  return out;
}

}  // namespace

TEST_CASE("rank lists are compact", "[launch][console]") {
  CHECK(rank_list({false, true}) == "rank 1");
  CHECK(rank_list({true, false, true}) == "ranks 0,2");
  CHECK(rank_list({true, true, true, true}) == "ranks 0-3");
  CHECK(rank_list({true, true, false, true, true, true}) == "ranks 0,1,3-5");
}

TEST_CASE("a line every node prints is printed once, without a rank", "[launch][console]") {
  ConsoleMerger merger(3);
  CHECK(merger.add(0, "[12:00:01.100] [rank 0] [info] connected to every peer", 0.0).empty());
  CHECK(merger.add(2, "[12:00:01.150] [rank 2] [info] connected to every peer", 0.1).empty());
  const auto out = merger.add(1, "[12:00:01.200] [rank 1] [info] connected to every peer", 0.2);
  REQUIRE(out.size() == 1);
  CHECK(out[0] == "[12:00:01.100] [info] connected to every peer\n");
}

TEST_CASE("lines that differ print with their ranks, in the order they came", "[launch][console]") {
  ConsoleMerger merger(2);
  const std::string out =
      run(merger,
          {{0, "[12:00:00.000] [rank 0] [info] listening on 127.0.0.1:5000", 0.0},
           {1, "[12:00:00.001] [rank 1] [info] listening on 127.0.0.1:5001", 0.0},
           {0, "[12:00:00.100] [rank 0] [info] connected to every peer", 0.1},
           {1, "[12:00:00.101] [rank 1] [info] connected to every peer", 0.1},
           {1, "[12:00:00.200] [rank 1] [warning] slow link", 0.2},
           {0, "[rank 0] resumed from iteration 5", 0.3},
           {1, "[rank 1] resumed from iteration 5", 0.3}},
          1.0);
  CHECK(out ==
        "[12:00:00.000] [rank 0] [info] listening on 127.0.0.1:5000\n"
        "[12:00:00.001] [rank 1] [info] listening on 127.0.0.1:5001\n"
        "[12:00:00.100] [info] connected to every peer\n"
        "[12:00:00.200] [rank 1] [warning] slow link\n"
        "resumed from iteration 5\n");
}

TEST_CASE("warnings every node prints name the ranks, and a held line waits at most the hold",
          "[launch][console]") {
  ConsoleMerger merger(2, 2.0);
  CHECK(merger.add(0, "[12:00:00.000] [rank 0] [warning] no job secret", 0.0).empty());
  const auto both = merger.add(1, "[12:00:00.001] [rank 1] [warning] no job secret", 0.0);
  REQUIRE(both.size() == 1);
  CHECK(both[0] == "[12:00:00.000] [ranks 0,1] [warning] no job secret\n");
  // Rank 1 never prints this one: it waits for the hold, then prints with rank 0's name.
  CHECK(merger.add(0, "[12:00:01.000] [rank 0] [info] only here", 1.0).empty());
  CHECK(merger.flush(2.5, false).empty());
  const auto late = merger.flush(3.0, false);
  REQUIRE(late.size() == 1);
  CHECK(late[0] == "[12:00:01.000] [rank 0] [info] only here\n");
}

TEST_CASE("epoch records print one job line when every node reported", "[launch][console]") {
  ConsoleMerger merger(2);
  CHECK(merger
            .add(0,
                 R"(@gradmesh epoch {"rank":0,"epoch":1,"epochs":5,"done":100,"loss":0.6868,)"
                 R"("accuracy":0.996,"samples_per_second":2919,"bytes_sent":32900000,)"
                 R"("compression_error":null})",
                 0.0)
            .empty());
  const auto out =
      merger.add(1,
                 R"(@gradmesh epoch {"rank":1,"epoch":1,"epochs":5,"done":100,"loss":0.6746,)"
                 R"("accuracy":0.996,"samples_per_second":2917,"bytes_sent":32900000,)"
                 R"("compression_error":null})",
                 0.1);
  REQUIRE(out.size() == 1);
  CHECK(out[0] ==
        "epoch 1/5  iter 100  loss 0.6807 (ranks 0.6746-0.6868)  test accuracy 99.60%  5836 "
        "samples/s  65.8 MB sent\n");
}

TEST_CASE("a user's metrics end the job's epoch line by name, ranked where they differ",
          "[launch][console]") {
  ConsoleMerger merger(2);
  const std::string record =
      R"("epochs":1,"done":10,"loss":0.5,"accuracy":0.75,"samples_per_second":100,)"
      R"("bytes_sent":1000000,"compression_error":null,"metrics":)";
  CHECK(merger
            .add(0,
                 R"(@gradmesh epoch {"rank":0,"epoch":1,)" + record +
                     R"({"top2_accuracy":0.875,"f1":0.5}})",
                 0.0)
            .empty());
  const auto out = merger.add(
      1,
      R"(@gradmesh epoch {"rank":1,"epoch":1,)" + record + R"({"top2_accuracy":0.875,"f1":0.25}})",
      0.1);
  REQUIRE(out.size() == 1);
  CHECK(out[0] ==
        "epoch 1/1  iter 10  loss 0.5000  test accuracy 75.00%  200 samples/s  2.0 MB sent  "
        "f1 0.375 (ranks 0.25-0.5)  top2_accuracy 0.875\n");
}

TEST_CASE("the job's progress is the slowest node's, with the nodes' rates summed",
          "[launch][console]") {
  ConsoleMerger merger(2);
  CHECK_FALSE(merger.progress_text(8));
  const auto progress = [](int rank, int iteration) {
    return "@gradmesh progress {\"rank\":" + std::to_string(rank) +
           ",\"epoch\":1,\"epochs\":2,\"iteration\":" + std::to_string(iteration) +
           ",\"iterations\":10,\"samples_per_second\":100.0,\"megabytes_per_second\":1.5,"
           "\"elapsed_seconds\":" +
           std::to_string(iteration) + ".0}";
  };
  CHECK(merger.add(0, progress(0, 6), 0.0).empty());
  CHECK(merger.add(1, progress(1, 4), 0.0).empty());
  const auto text = merger.progress_text(10);
  REQUIRE(text);
  CHECK(*text == "epoch 1/2 [####------] 4/10  200 samples/s  3.0 MB/s  ETA 0:06  (2 nodes)");
}

TEST_CASE("a malformed record is printed as it came", "[launch][console]") {
  ConsoleMerger merger(1);
  const auto out = merger.add(0, "@gradmesh epoch {not json", 0.0);
  REQUIRE(out.size() == 1);
  CHECK(out[0] == "@gradmesh epoch {not json\n");
}

TEST_CASE("a record waits for nothing the nodes printed before it", "[launch][console]") {
  ConsoleMerger merger(2, 2.0);
  // Each node's own line (it differs), then both nodes' epoch records at once: the lines come out
  // first, though neither was held its 2 s.
  CHECK(merger.add(0, "[12:00:00.000] [rank 0] [info] share [0, 50)", 0.0).empty());
  CHECK(merger.add(1, "[12:00:00.000] [rank 1] [info] share [50, 100)", 0.0).empty());
  const std::string record =
      R"("epochs":1,"done":10,"loss":0.5,"accuracy":null,"samples_per_second":10,)"
      R"("bytes_sent":0,"compression_error":null})";
  CHECK(merger.add(0, "@gradmesh epoch {\"rank\":0,\"epoch\":1," + record, 0.1).empty());
  const auto out = merger.add(1, "@gradmesh epoch {\"rank\":1,\"epoch\":1," + record, 0.1);
  REQUIRE(out.size() == 3);
  CHECK(out[0] == "[12:00:00.000] [rank 0] [info] share [0, 50)\n");
  CHECK(out[1] == "[12:00:00.000] [rank 1] [info] share [50, 100)\n");
  CHECK_THAT(out[2], Catch::StartsWith("epoch 1/1  iter 10  loss 0.5000"));
}
