#!/usr/bin/env bash
# Runs the whole test suite from a fresh machine: installs the Debian packages, builds (Release,
# with tests), runs every Catch2 test through CTest. Each test has its own time limit.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh -DGRADMESH_BUILD_TESTS=ON
ctest --test-dir build --output-on-failure -j 2 --timeout 600
