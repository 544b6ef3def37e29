#include "engine/trace_recorder.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "engine/executor.h"

using gradmesh::engine::Arena;
using gradmesh::engine::Executor;
using gradmesh::engine::Graph;
using gradmesh::engine::TaskContext;
using gradmesh::engine::TaskEvent;
using gradmesh::engine::TraceRecorder;

TEST_CASE("trace recorder sees each task start before it ends, in dependency order",
          "[engine][trace]") {
  auto trace = std::make_shared<TraceRecorder>();
  Executor ex;
  ex.add_observer(trace);
  Graph g;
  auto a = g.emplace("forward", Arena::kCompute, [](TaskContext&) {});
  auto b = g.emplace("push", Arena::kNetwork, [](TaskContext&) {});
  a.precede(b);
  ex.run(g);
  ex.run(g);
  CHECK(trace->entries().size() == 8);
  for (std::uint64_t run : {0u, 1u}) {
    auto a_start = trace->time_of(TaskEvent::Kind::kStart, "forward", run);
    auto a_end = trace->time_of(TaskEvent::Kind::kEnd, "forward", run);
    auto b_start = trace->time_of(TaskEvent::Kind::kStart, "push", run);
    REQUIRE(a_start);
    REQUIRE(a_end);
    REQUIRE(b_start);
    CHECK(*a_start <= *a_end);
    CHECK(*a_end <= *b_start);
  }
  CHECK_FALSE(trace->time_of(TaskEvent::Kind::kStart, "forward", 2));

  const auto path = std::filesystem::temp_directory_path() / "gradmesh_trace_test.json";
  trace->write_chrome_trace(path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK_THAT(text.str(), Catch::Contains(R"("name":"push","ph":"B")"));
  std::filesystem::remove(path);
  trace->clear();
  CHECK(trace->entries().empty());
}
