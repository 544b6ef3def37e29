#!/usr/bin/env bash
# Configures and builds gradmesh (Release) into build/; the binaries land in build/bin/.
#
#   bash scripts/build.sh [CMAKE_ARGS...]          everything: libraries, gradmesh-node and
#       gradmesh-launch, tests, benchmarks, examples, and the CUDA kernels (sm_80, sm_90) when a
#       CUDA toolkit is installed, GPU or not (what scripts/test.sh and CI build)
#   bash scripts/build.sh --demo [CMAKE_ARGS...]   gradmesh-node and gradmesh-launch only; the CUDA
#       kernels only when a GPU is visible (nvidia-smi), for that GPU's architecture only
#
# Extra arguments go to CMake's configure step. Both modes share build/: switching costs a
# reconfigure and the targets the other mode did not build.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
if [[ ${1:-} == --demo ]]; then
  shift
  cuda=(-DGRADMESH_WITH_CUDA=OFF)
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    cuda=(-DGRADMESH_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native)
  fi
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGRADMESH_BUILD_TESTS=OFF \
    -DGRADMESH_BUILD_BENCH=OFF -DGRADMESH_BUILD_EXAMPLES=OFF "${cuda[@]}" "$@"
  cmake --build build -j "$jobs" --target gradmesh-node gradmesh-launch
else
  # -U: a --demo build's `native` architectures give way to the default ones (CMakeLists.txt).
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGRADMESH_BUILD_TESTS=ON \
    -DGRADMESH_BUILD_BENCH=ON -DGRADMESH_BUILD_EXAMPLES=ON -DGRADMESH_WITH_CUDA=ON \
    -UCMAKE_CUDA_ARCHITECTURES "$@"
  cmake --build build -j "$jobs"
fi
