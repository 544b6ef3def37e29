// bench/machine_state: one line of the machine's state (bench/machine_state.h), for scripts that
// time gradmesh-node (bench/compare.sh, bench/tta.sh) to print beside their figures.
//
//   build/bench/bench_machine_state [--seconds S]   (default 0.3)
// A benchmark, never a test.

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench/machine_state.h"

int main(int argc, char** argv) {
  double seconds = 0.3;
  if (argc == 3 && std::strcmp(argv[1], "--seconds") == 0) {
    seconds = std::strtod(argv[2], nullptr);
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: bench_machine_state [--seconds S]\n");
    return 2;
  }
  std::printf("%s\n",
              gradmesh::bench::format_machine_state(gradmesh::bench::measure_machine_state(seconds))
                  .c_str());
  return 0;
}
