#!/usr/bin/env bash
# Fuzzes the frame decoder and the handshake (tests/fuzz/frame_fuzz.cpp: net/frame.h's
# decode_prefix() and verify_header(), the reads of a verified header, and the handshake's
# decode_challenge(), Challenge and Hello checks and MAC verification) with libFuzzer under
# AddressSanitizer.
#
#   scripts/fuzz.sh [RUNS [SEED]]    RUNS inputs (default 100000), libFuzzer -seed=SEED (default 1)
#
# Configures a clang build in build-fuzz/ (only the fuzz targets are built), writes a seed corpus
# of valid frames into build-fuzz/corpus/frame/ and runs RUNS inputs. Exits non-zero when clang is
# missing or an input crashes the decoder, leaks or trips ASan; the input is saved as
# build-fuzz/crash-* (replay: build-fuzz/tests/fuzz/frame_fuzz build-fuzz/crash-...).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-100000}
seed=${2:-1}
jobs=$(nproc 2>/dev/null || echo 2)

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ not found: libFuzzer needs clang (Debian package clang; scripts/setup.sh" \
       "installs it)" >&2
  exit 2
fi

mkdir -p build-fuzz
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGRADMESH_BUILD_FUZZ=ON -DGRADMESH_BUILD_TESTS=OFF -DGRADMESH_BUILD_BENCH=OFF \
  -DGRADMESH_BUILD_EXAMPLES=OFF -DGRADMESH_WITH_CUDA=OFF >build-fuzz/configure.log 2>&1 || {
  cat build-fuzz/configure.log >&2
  echo "fuzz: configuring build-fuzz/ failed (log above)" >&2
  exit 1
}
cmake --build build-fuzz -j "$jobs" --target frame_fuzz frame_fuzz_seeds

corpus=build-fuzz/corpus/frame
rm -rf "$corpus"
build-fuzz/tests/fuzz/frame_fuzz_seeds "$corpus"
echo "fuzz: $runs inputs, seed $seed, corpus $corpus ($(ls "$corpus" | wc -l) seeds)"
start=$(date +%s)
build-fuzz/tests/fuzz/frame_fuzz -runs="$runs" -seed="$seed" -max_len=4096 -timeout=10 \
  -print_final_stats=1 -artifact_prefix=build-fuzz/ "$corpus"
echo "fuzz: $runs inputs without a crash in $(( $(date +%s) - start )) s"
