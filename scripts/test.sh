#!/usr/bin/env bash
# Runs the whole test suite from a fresh machine: installs the Debian packages, builds everything
# (Release: tests, benchmarks, examples, the CUDA kernels when the toolkit is there), runs every
# Catch2 test through CTest. Each test has its own time limit.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# CTest runs each Catch2 test by its name: a ';' splits the name in two (a CMake list) and a
# leading '-' reads as a flag, and either way the test passes without running. Refuse both.
bad=$(find build/tests -type f -executable -name '*tests' -exec {} --list-test-names-only \; \
      | grep -E ';|^-' || true)
if [[ -n $bad ]]; then
  echo "test names CTest cannot run (no ';', no leading '-'):" >&2
  echo "$bad" >&2
  exit 1
fi
ctest --test-dir build --output-on-failure -j 2 --timeout 600
