#!/usr/bin/env bash
# bench/gpu_check.sh: the CUDA backend on a machine with a GPU — its kernel, layer and codec tests, the
# backend chosen through the module, and the CNN trained on the GPU and on the CPU, one node each,
# then two nodes on the one GPU with `poseidon` (SFB rebuilt and stepped on the device), and the
# ResNet graph on two nodes by strategy (both ranks must train alike; SyncBN too).
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
# The gradient codecs' kernels against the host's Codec, bit for bit (issue 28; "CUDA codec kernels
# skipped" in this log means they did not run).
"$build"/tests/sync/compress/compress_tests '[device]' -s 2>&1 | grep -E "skipped|passed|failed" \
  | tee "$out/codec_tests.log"
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

# The ResNet graph on two nodes of the one GPU (synthetic 1x28x28 images), by strategy: both ranks
# must train alike. On the H200 (2026-11-28) ps with layers split in KV chunks left rank 0's loss
# at 2.3042 (its model frozen): new device buffers were zeroed on the legacy stream, which the
# backend's non-blocking stream never waits for (fixed in dbaa498). With model.sync_batch_norm
# the batch statistics come down to the host, are combined there and go back up.
resnet=(--config configs/fashion-mnist-resnet.toml --set data.dataset=synthetic
  --set 'data.shape=[1,28,28]' --set job.max_iterations=25 --set compute.device=cuda)
for run in "ps" "ps --set sync.ps.chunk_bytes=65536" "allreduce" "auto" \
  "allreduce --set model.sync_batch_norm=true"; do
  name=resnet-${run// /_}
  read -r -a extra <<< "$run"
  pids=()
  for rank in 0 1; do
    "$build"/bin/gradmesh-node "${resnet[@]}" --peers 127.0.0.1:29621,127.0.0.1:29622 \
      --rank $rank --set sync.strategy="${extra[0]}" "${extra[@]:1}" \
      --metrics-out "$out/$name" > "$out/$name-$rank.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  python3 - "$out/$name" "$run" <<'PY'
import json, sys
losses = [json.load(open(f"{sys.argv[1]}/node-{r}.json"))["train_loss"] for r in (0, 1)]
verdict = "ok" if abs(losses[0] - losses[1]) < 0.1 and max(losses) < 2.0 else "RANKS DIFFER"
print(f"resnet, {sys.argv[2]}: train loss rank 0 {losses[0]:.4f}, rank 1 {losses[1]:.4f}: {verdict}")
PY
done
