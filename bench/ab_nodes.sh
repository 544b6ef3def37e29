#!/usr/bin/env bash
# bench/ab_nodes.sh: two gradmesh-node builds side by side on real links, runs alternated (A, B,
# A, B, ...), for a change that must not slow training or change its bytes: 4 gradmesh-node
# processes in network namespaces joined by kernel-shaped (tbf) links of RATE
# (../shared/tools/netns-cluster.sh), one job per compression method, job.max_iterations =
# ITERATIONS, compute.threads = 1 (4 nodes on 2 cores: the default 2 threads a node oversubscribe
# them; docs/compression.md).
#
# Columns: method; build; runs; samples/s a node (mean over the 4 nodes; median, min and max over
# the runs); bytes sent a node per iteration (median); B's median samples/s over A's; what the
# planner put on the layers (rank 0's plan, the runs' distinct plans joined by " | "). Where the
# runs' plans differ (the planner's inputs are measured: a compressor near its break-even flips),
# one more line per plan and build compares the same plan with the same plan.
#
#   sudo A=/path/to/old/gradmesh-node [B=./build/bin/gradmesh-node] bash bench/ab_nodes.sh \
#        ["METHODS"] [RUNS] [ITERATIONS] [RATE] [CONFIG]
#   (defaults "none fp16 bf16 int8 topk randomk powersgd", 3, 40, 100mbit, the large MLP; needs
#   root, iproute2 and both builds; EXTRA adds --set arguments to every run)
set -euo pipefail
cd "$(dirname "$0")/.."
methods=${1:-"none fp16 bf16 int8 topk randomk powersgd"}
runs=${2:-3}
iterations=${3:-40}
rate=${4:-100mbit}
config=${5:-configs/fashion-mnist-mlp-large.toml}
: "${A:?set A to the baseline gradmesh-node binary}"
B=${B:-./build/bin/gradmesh-node}
source bench/lib/netns_nodes.sh
netns_check || exit 2
nodes=4
out=${OUT:-out/bench-ab}
rm -rf "$out"
mkdir -p "$out"
trap netns_down EXIT
netns_up $nodes "$rate"
uname -n >&2
for ((run = 1; run <= runs; run++)); do
  # The host's mode beside every round (bench/machine_state.h): compare figures within one.
  "$(dirname "$B")/../bench/bench_machine_state" >&2 || true
  for method in $methods; do
    # Alternate which build goes first, so that a drift of the host's speed falls on both.
    if ((run % 2)); then order="A B"; else order="B A"; fi
    for build in $order; do
      dir="$out/$method/$build/$run"
      binary=$A
      [ "$build" = B ] && binary=$B
      echo "== $dir" >&2
      mkdir -p "$dir"
      GRADMESH_NODE=$binary netns_nodes "$dir" $nodes "$config" \
        --set sync.strategy=auto --set sync.compression.method="$method" \
        --set job.max_iterations="$iterations" --set compute.threads=1 \
        --set data.test_limit=500 ${EXTRA:-} > "$dir/codes"
    done
  done
done
python3 - "$out" "$methods" <<'EOF'
import glob, json, statistics, sys
out, methods = sys.argv[1], sys.argv[2].split()
print(f"{'method':11} build runs  samples/s median (min-max)  bytes/it median  B/A    plan")
def row(method, build, runs, ratio=""):
    rates = [r for r, _, _ in runs]
    sent = [b for _, b, _ in runs]
    plans = sorted({p for _, _, p in runs})
    print(f"{method:11} {build:5} {len(rates):4}  {statistics.median(rates):7.1f} "
          f"({min(rates):.1f}-{max(rates):.1f})     {statistics.median(sent):12.0f}  {ratio:6} "
          f"{' | '.join(plans)}")
for method in methods:
    by_build = {}
    for build in ("A", "B"):
        runs = []
        for run in sorted(glob.glob(f"{out}/{method}/{build}/*")):
            nodes = [json.load(open(f)) for f in sorted(glob.glob(f"{run}/node-*.json"))]
            if len(nodes) != 4:
                print(f"{method:11} {build}     {run}: {len(nodes)} of 4 nodes finished")
                continue
            runs.append((statistics.mean(n["samples_per_second"] for n in nodes),
                         statistics.mean(n["bytes_sent_per_iteration"] for n in nodes),
                         ", ".join(r["scheme"] for r in nodes[0]["plan"] if r["scheme"] != "-")))
        by_build[build] = runs
    for build in ("A", "B"):
        if not by_build[build]:
            continue
        ratio = ""
        if build == "B" and by_build["A"]:
            a = statistics.median(r for r, _, _ in by_build["A"])
            ratio = f"{statistics.median(r for r, _, _ in by_build['B']) / a:.3f}"
        row(method, build, by_build[build], ratio)
    # Where the planner chose differently between runs (its inputs are measured, and a compressor
    # near break-even flips), the same plan against the same plan: one line per plan and build.
    plans = {p for runs in by_build.values() for _, _, p in runs}
    if len(plans) > 1:
        for plan in sorted(plans):
            for build in ("A", "B"):
                runs = [r for r in by_build[build] if r[2] == plan]
                if runs:
                    row(f"  {method}", build, runs)
EOF
