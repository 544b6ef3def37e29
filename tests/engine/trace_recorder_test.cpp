#include "engine/trace_recorder.h"

#include <chrono>
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
  CHECK_THAT(text.str(), Catch::Contains(R"("name":"push","cat":"network","ph":"X")"));
  std::filesystem::remove(path);
  trace->clear();
  CHECK(trace->entries().empty());
}

TEST_CASE("a Chrome trace lays overlapping tasks of one arena on separate threads, pid the rank",
          "[engine][trace]") {
  TraceRecorder trace;
  const auto t0 = std::chrono::steady_clock::now();
  const auto at = [t0](int ms) { return t0 + std::chrono::milliseconds(ms); };
  const auto event = [&](TaskEvent::Kind kind, std::string_view name, std::size_t task, Arena arena,
                         int ms, bool failed = false) {
    TaskEvent e;
    e.kind = kind;
    e.name = name;
    e.task = task;
    e.arena = arena;
    e.run = 7;
    e.time = at(ms);
    e.failed = failed;
    if (kind == TaskEvent::Kind::kStart)
      trace.on_task_start(e);
    else
      trace.on_task_end(e);
  };
  using K = TaskEvent::Kind;
  // Two sends in flight at once (deferred network tasks), a third after the first ended, a
  // compute task, and a receive that never ends.
  event(K::kStart, "send_a", 0, Arena::kNetwork, 10);
  event(K::kStart, "send_b", 1, Arena::kNetwork, 20);
  event(K::kEnd, "send_a", 0, Arena::kNetwork, 30);
  event(K::kStart, "send_c", 2, Arena::kNetwork, 35);
  event(K::kEnd, "send_b", 1, Arena::kNetwork, 40, /*failed=*/true);
  event(K::kEnd, "send_c", 2, Arena::kNetwork, 50);
  event(K::kStart, "forward", 3, Arena::kCompute, 12);
  event(K::kEnd, "forward", 3, Arena::kCompute, 18);
  event(K::kStart, "receive", 4, Arena::kNetwork, 45);

  const auto path = std::filesystem::temp_directory_path() / "gradmesh_trace_lanes_test.json";
  trace.write_chrome_trace(path, 3);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(path);
  const std::string json = text.str();
  INFO(json);
  const auto slice = [&json](std::string_view name) {
    const std::size_t at = json.find("{\"name\":\"" + std::string(name) + "\"");
    REQUIRE(at != std::string::npos);
    return json.substr(at, json.find('\n', at) - at);
  };
  CHECK_THAT(json, Catch::Contains(R"("otherData":{"rank":3,"origin_unix_us":)"));
  CHECK_THAT(json, Catch::Contains(R"({"name":"process_name","ph":"M","pid":3,)"));
  CHECK_THAT(json, Catch::Contains(R"("tid":1002,"args":{"name":"network 1"})"));
  CHECK_THAT(json, !Catch::Contains(R"("tid":1003)"));  // two network lanes suffice
  CHECK_THAT(slice("send_a"), Catch::Contains(R"("dur":20000.000,"pid":3,"tid":1001)"));
  CHECK_THAT(slice("send_b"), Catch::Contains(R"("dur":20000.000,"pid":3,"tid":1002)"));
  CHECK_THAT(slice("send_b"), Catch::Contains(R"("failed":true)"));
  CHECK_THAT(slice("send_c"), Catch::Contains(R"("pid":3,"tid":1001)"));  // send_a's lane, free
  CHECK_THAT(slice("forward"), Catch::Contains(R"("dur":6000.000,"pid":3,"tid":1,)"));
  // Never ended: lasts until the last event (50 ms), on the lane send_b freed at 40 ms.
  CHECK_THAT(slice("receive"), Catch::Contains(R"("dur":5000.000,"pid":3,"tid":1002)"));
  CHECK_THAT(slice("receive"), Catch::Contains(R"("unfinished":true)"));
}
