#!/usr/bin/env bash
# Installs every build, test and data dependency of gradmesh from Debian packages (python3 and
# gnuplot-nox: scripts/report, which a test runs; clang and its libFuzzer runtime,
# libclang-rt-14-dev, only recommended by clang 14: scripts/fuzz.sh; clang-format: scripts/format.sh,
# which .ci/run runs).
# `--demo`: what scripts/demo.sh needs only (no gnuplot, clang, its runtime or clang-format).
# Idempotent: packages already present are skipped, so a second run costs a few seconds.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libtbb-dev libuv1-dev libflatbuffers-dev flatbuffers-compiler catch2 libopenblas-dev libdnnl-dev
  libsodium-dev
  libcli11-dev libtomlplusplus-dev libspdlog-dev libfmt-dev nlohmann-json3-dev zlib1g-dev
  dataset-fashion-mnist
  python3
)
[[ ${1:-} == --demo ]] || packages+=(gnuplot-nox clang libclang-rt-14-dev clang-format)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
