#!/usr/bin/env bash
# bench/stragglers.sh: a job with one slow node (issue 57: "with one of 4 nodes slowed to half
# speed, the quorum rounds keep the job at >= 0.7 of its all-fast samples/s; say what BSP auto
# drops to"). 4 gradmesh-node processes on 127.0.0.1 (unshaped), compute.threads = 1, so the 4
# share the 2 cores at about half a core each; the slowed one, rank 3, runs in a cgroup (v1
# cpu controller) capped at a quarter of a core: half its share. Each job runs twice, all fast
# and with rank 3 slowed, alternated (all fast first on odd runs).
#
# The job's samples/s: the samples every node trained, over the longest training time of a node
# (metrics "samples" and "train_seconds"): with quorum rounds a straggler trains fewer iterations
# (the job ends for it once a quorum has ended), under BSP every node waits for it.
#
#   sudo bash bench/stragglers.sh [RUNS] [ITERATIONS] [CONFIG]
#   (defaults 3, 1500, configs/fashion-mnist-mlp.toml; needs root for the cgroup; JOBS lists
#   the jobs as name=--set arguments separated by ';', default: BSP auto, local with every
#   node's rounds and local with a quorum of 3 of 4, H = 20)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
iterations=${2:-1500}
config=${3:-configs/fashion-mnist-mlp.toml}
node=./build/bin/gradmesh-node
jobs=${JOBS:-"auto=--set sync.strategy=auto;local=--set sync.strategy=local --set sync.local.steps=20;local-quorum-3=--set sync.strategy=local --set sync.local.steps=20 --set sync.local.quorum=3"}
cgroup=/sys/fs/cgroup/cpu/gradmesh-straggler
if [ ! -d /sys/fs/cgroup/cpu ]; then
  echo "bench/stragglers.sh: needs the cgroup v1 cpu controller at /sys/fs/cgroup/cpu" >&2
  exit 2
fi
mkdir -p "$cgroup"
echo 100000 > "$cgroup/cpu.cfs_period_us"
echo 25000 > "$cgroup/cpu.cfs_quota_us"  # a quarter of a core
out=${OUT:-out/bench-stragglers}
rm -rf "$out"
mkdir -p "$out"

# run DIR SLOW ARGS...: one job of 4 nodes; rank 3 in the capped cgroup when SLOW is 1.
run() {
  local dir=$1 slow=$2
  shift 2
  mkdir -p "$dir"
  local base=$((20000 + RANDOM % 20000)) peers="" r
  for r in 0 1 2 3; do peers+="${peers:+,}127.0.0.1:$((base + r))"; done
  local pids=()
  for r in 0 1 2 3; do
    local cmd=("$node" --config "$config" --peers "$peers" --rank "$r" --metrics-out "$dir"
      --set job.max_iterations="$iterations" --set compute.threads=1 --set data.test_limit=1000
      "$@")
    if [ "$slow" = 1 ] && [ "$r" = 3 ]; then
      sh -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$cgroup" "${cmd[@]}" > "$dir/log-$r.txt" 2>&1 &
    else
      "${cmd[@]}" > "$dir/log-$r.txt" 2>&1 &
    fi
    pids+=($!)
  done
  local code=0
  for pid in "${pids[@]}"; do wait "$pid" || code=$?; done
  echo "$code" > "$dir/code"
}

uname -n >&2
for ((k = 1; k <= runs; k++)); do
  ./build/bench/bench_machine_state >&2 || true
  if ((k % 2)); then order="0 1"; else order="1 0"; fi
  IFS=';' read -ra specs <<< "$jobs"
  for spec in "${specs[@]}"; do
    name=${spec%%=*}
    read -ra args <<< "${spec#*=}"
    for slow in $order; do
      dir="$out/$name/slow-$slow/$k"
      echo "== $dir" >&2
      run "$dir" "$slow" "${args[@]}"
    done
  done
done
rmdir "$cgroup" 2>/dev/null || true

python3 - "$out" <<'EOF'
import glob, json, os, statistics, sys
out = sys.argv[1]
def job_rate(d):
    nodes = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(d, "node-*.json")))]
    if len(nodes) != 4:
        return None, None, None
    samples = sum(n["samples"] for n in nodes)
    seconds = max(n["train_seconds"] for n in nodes)
    acc = min(n.get("final_test_accuracy", n["test_accuracy"]) for n in nodes)
    return samples / seconds, acc, [n["iterations"] for n in nodes]
print(f"{'job':16} {'all fast samples/s':>20} {'rank 3 slowed':>16} {'slowed/fast':>12}  "
      f"iterations a node (slowed)  final accuracy (fast, slowed)")
for name in sorted(os.listdir(out)):
    rates = {0: [], 1: []}
    accs = {0: [], 1: []}
    its = []
    for slow in (0, 1):
        for d in sorted(glob.glob(os.path.join(out, name, f"slow-{slow}", "*"))):
            r, a, i = job_rate(d)
            if r is None:
                print(f"{name}: {d} did not finish (see its logs)")
                continue
            rates[slow].append(r)
            accs[slow].append(a)
            if slow:
                its.append(i)
    if not rates[0] or not rates[1]:
        continue
    fast, slowed = statistics.median(rates[0]), statistics.median(rates[1])
    ratios = sorted(s / f for f, s in zip(rates[0], rates[1]))
    print(f"{name:16} {fast:20.0f} {slowed:16.0f} {slowed / fast:12.2f}  {its[-1] if its else ''}"
          f"  {statistics.median(accs[0]):.4f}, {statistics.median(accs[1]):.4f}"
          f"  (per-run ratios {', '.join(f'{x:.2f}' for x in ratios)})")
EOF
