#include <cstdio>

#include <catch2/catch.hpp>

#include "apps/pipeline/progress.h"

using gradmesh::app::format_progress;
using gradmesh::app::ProgressReporter;
using gradmesh::app::ProgressSnapshot;

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
  ProgressReporter every_time(file, 0.0);
  CHECK_FALSE(every_time.terminal());
  CHECK(every_time.due(false));
  CHECK_FALSE(every_time.due(true));  // the epoch's own line follows
  ProgressReporter rarely(file, 3600.0);
  CHECK_FALSE(rarely.due(false));
  every_time.update(ProgressSnapshot{0, 1, 1, 3, 10, 100, 1, 1});
  every_time.finish();
  std::rewind(file);
  char line[200] = {};
  REQUIRE(std::fgets(line, sizeof line, file) != nullptr);
  CHECK(std::string(line) == "[rank 0] epoch 1/1 3/10  100 samples/s  1.0 MB/s  ETA 0:02\n");
  std::fclose(file);
}
