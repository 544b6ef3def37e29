#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "apps/pipeline/progress.h"

using gradmesh::app::colour_allowed;
using gradmesh::app::format_progress;
using gradmesh::app::progress_style;
using gradmesh::app::ProgressReporter;
using gradmesh::app::ProgressSnapshot;
using gradmesh::app::ProgressStyle;

TEST_CASE("the progress bar shows iterations, rates and the epoch's ETA", "[pipeline]") {
  ProgressSnapshot s{1, 2, 5, 250, 1000, 2650.4, 31.25, 10.0};
  // 250 of 1000 iterations in 10 s: 750 more at the same rate take 30 s.
  CHECK(format_progress(s, 20) ==
        "[rank 1] epoch 2/5 [#####---------------] 250/1000  2650 samples/s  31.2 MB/s  ETA 0:30");
  CHECK(format_progress(s, 0) ==
        "[rank 1] epoch 2/5 250/1000  2650 samples/s  31.2 MB/s  ETA 0:30");
  s.iteration = 0;
  CHECK_THAT(format_progress(s, 4),
             Catch::Contains("[----] 0/1000") && Catch::EndsWith("ETA --:--"));
  s.iteration = 1;
  s.elapsed_seconds = 5.0;  // 999 more at 5 s each
  CHECK_THAT(format_progress(s, 0), Catch::EndsWith("ETA 1:23:15"));
  s.iteration = s.iterations;
  CHECK_THAT(format_progress(s, 4),
             Catch::Contains("[####] 1000/1000") && Catch::EndsWith("ETA 0:00"));
}

TEST_CASE("away from a terminal the progress is a plain line now and then", "[pipeline]") {
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  ProgressReporter every_time(file, ProgressStyle::kLines, 0.0);
  CHECK(every_time.due(false));
  CHECK_FALSE(every_time.due(true));  // the epoch's own line follows
  ProgressReporter rarely(file, ProgressStyle::kLines, 3600.0);
  CHECK_FALSE(rarely.due(false));
  every_time.update(ProgressSnapshot{0, 1, 1, 3, 10, 100, 1, 1});
  every_time.finish();
  std::rewind(file);
  char line[200] = {};
  REQUIRE(std::fgets(line, sizeof line, file) != nullptr);
  CHECK(std::string(line) == "[rank 0] epoch 1/1 3/10  100 samples/s  1.0 MB/s  ETA 0:02\n");
  std::fclose(file);
}

namespace {

/// An environment of `vars` ("NAME=value").
gradmesh::topo::EnvLookup environment(std::vector<std::string> vars) {
  return [vars](std::string_view name) -> std::optional<std::string> {
    for (const std::string& v : vars) {
      if (v.starts_with(std::string(name) + "=")) return v.substr(name.size() + 1);
    }
    return std::nullopt;
  };
}

}  // namespace

TEST_CASE(
    "a bar only on a terminal, never under a multi-rank launcher or TERM=dumb, records for "
    "gradmesh-launch",
    "[pipeline]") {
  const auto none = environment({});
  CHECK(progress_style("auto", true, none) == ProgressStyle::kBar);
  CHECK(progress_style("auto", false, none) == ProgressStyle::kLines);
  CHECK(progress_style("auto", true, environment({"TERM=dumb"})) == ProgressStyle::kLines);
  // mpirun gives every rank a pseudo-terminal: their bars would tangle into one line.
  CHECK(progress_style("auto", true, environment({"OMPI_COMM_WORLD_SIZE=4"})) ==
        ProgressStyle::kLines);
  CHECK(progress_style("auto", true, environment({"WORLD_SIZE=1"})) == ProgressStyle::kBar);
  CHECK(progress_style("bar", false, none) == ProgressStyle::kBar);
  CHECK(progress_style("line", true, none) == ProgressStyle::kLines);
  CHECK(progress_style("none", true, none) == ProgressStyle::kNone);
  CHECK(progress_style("auto", true, environment({"GRADMESH_CONSOLE=records"})) ==
        ProgressStyle::kRecords);
  CHECK_THROWS_WITH(progress_style("fancy", true, none),
                    Catch::Contains("--progress") && Catch::Contains("fancy"));

  CHECK(colour_allowed(true, none));
  CHECK_FALSE(colour_allowed(false, none));
  CHECK_FALSE(colour_allowed(true, environment({"NO_COLOR=1"})));
  CHECK_FALSE(colour_allowed(true, environment({"TERM=dumb"})));
  CHECK_FALSE(colour_allowed(true, environment({"PMI_SIZE=2"})));
}

TEST_CASE("records mode writes a progress record twice a second and at the epoch's end",
          "[pipeline]") {
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  ProgressReporter records(file, ProgressStyle::kRecords);
  CHECK(records.due(true));
  records.update(ProgressSnapshot{2, 1, 3, 4, 10, 250.5, 1.25, 2.0});
  CHECK_FALSE(records.due(false));  // just written
  records.finish();
  std::rewind(file);
  char line[400] = {};
  REQUIRE(std::fgets(line, sizeof line, file) != nullptr);
  CHECK(std::string(line) ==
        "@gradmesh progress {\"rank\":2,\"epoch\":1,\"epochs\":3,\"iteration\":4,"
        "\"iterations\":10,\"samples_per_second\":250.500,\"megabytes_per_second\":1.2500,"
        "\"elapsed_seconds\":2.000}\n");
  CHECK(std::fgets(line, sizeof line, file) == nullptr);  // finish() writes nothing
  std::fclose(file);
}
