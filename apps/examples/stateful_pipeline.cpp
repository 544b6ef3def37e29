// A user-defined pipeline on the gradmesh engine, without any neural network: it shows the API
// a training pipeline is built from.
//
//   source (compute, stateful) -> square (compute) -> publish (network, deferred) -> sink (compute,
//   stateful)
//                              \-> count (network) ------------------------------/
//
// - tasks own explicit state that persists across runs (the source's counter, the sink's sum);
// - compute and network tasks run on separate arenas;
// - `publish` defers its end until an outside event (here a timer thread; in gradmesh, a message
//   from a peer) completes it, without blocking a thread meanwhile;
// - a TraceRecorder observer sees every task start and end.

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "engine/executor.h"
#include "engine/trace_recorder.h"

using namespace gradmesh::engine;

int main() {
  struct Source {
    long next = 1;
    long value = 0;
  };
  struct Sink {
    long sum = 0;
  };

  Graph graph;
  long squared = 0;
  auto source = graph.emplace_stateful("source", Arena::kCompute, Source{},
                                       [](Source& s, TaskContext&) { s.value = s.next++; });
  auto square = graph.emplace("square", Arena::kCompute, [&](TaskContext&) {
    const long v = graph.state<Source>(source).value;
    squared = v * v;
  });
  std::thread io;
  auto publish = graph.emplace("publish", Arena::kNetwork, [&](TaskContext& ctx) {
    Completion done = ctx.defer();  // ends when the "network" says so
    if (io.joinable()) io.join();
    io = std::thread([done] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      done.complete();
    });
  });
  auto count = graph.emplace("count", Arena::kNetwork, [](TaskContext& ctx) {
    std::printf("  run %llu: network arena counts\n", static_cast<unsigned long long>(ctx.run()));
  });
  auto sink = graph.emplace_stateful("sink", Arena::kCompute, Sink{},
                                     [&](Sink& s, TaskContext&) { s.sum += squared; });
  source.precede(square);
  square.precede(publish);
  publish.precede(sink);
  source.precede(count);
  count.precede(sink);

  Executor executor({1, 1});
  auto trace = std::make_shared<TraceRecorder>();
  executor.add_observer(trace);
  for (int i = 0; i < 5; ++i) executor.run(graph);
  if (io.joinable()) io.join();

  std::printf("sum of squares 1..5 = %ld (expected 55), %zu task events traced\n",
              graph.state<Sink>(sink).sum, trace->entries().size());
  return graph.state<Sink>(sink).sum == 55 ? 0 : 1;
}
