#!/usr/bin/env bash
# bench/gpu_check.sh: the CUDA backend on a machine with a GPU — its kernel and layer tests, the
# backend chosen through the module, and the CNN trained on the GPU and on the CPU, one node each,
# then two nodes on the one GPU with `poseidon` (SFB rebuilt and stepped on the device).
#
#   bash bench/gpu_check.sh [BUILD_DIR] [DATA_DIR] [OUT_DIR]
#   (defaults build, the config's data.path, out/gpu-check; needs a CUDA build: scripts/build.sh
#   on a machine with the toolkit builds the tests; scripts/build.sh --demo builds no tests)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
data=${2:-}
out=${3:-out/gpu-check}
rm -rf "$out" && mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$build"/tests/tasks/tasks_cuda_tests --durations yes | tee "$out/cuda_tests.log"
"$build"/tests/tasks/tasks_tests '[backend]' | tee "$out/backend_tests.log"
common=(--set data.test_limit=2000 --set job.max_iterations=300)
[[ -n $data ]] && common+=(--set "data.path=$data")
for device in cuda cpu; do
  "$build"/bin/gradmesh-node --config configs/fashion-mnist-cnn.toml --set sync.strategy=none \
    --set compute.device=$device "${common[@]}" --metrics-out "$out/one-$device" \
    > "$out/one-$device.log" 2>&1
  tail -1 "$out/one-$device.log"
done
pids=()
for rank in 0 1; do
  "$build"/bin/gradmesh-node --config configs/fashion-mnist-cnn.toml \
    --peers 127.0.0.1:29611,127.0.0.1:29612 --rank $rank --set sync.strategy=poseidon \
    --set compute.device=cuda "${common[@]}" --metrics-out "$out/two-cuda" \
    > "$out/two-cuda-$rank.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
tail -1 "$out/two-cuda-0.log"
