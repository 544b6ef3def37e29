#!/usr/bin/env bash
# bench/compare.sh: every BSP strategy on the same config, node count and send cap, one table.
#
# Part 1: 4 local nodes on the large MLP (configs/fashion-mnist-mlp-large.toml, 20M parameters),
# strategies ps, poseidon, allreduce and auto, at net.max_send_rate = unlimited, 1gbit, 100mbit.
# Part 2: the demo MLP (configs/fashion-mnist-mlp.toml): one `none` node, then each strategy on 4
# nodes, uncapped; prints the best strategy's samples/s (all nodes) over the single node's.
#
# GRADMESH_BIN names the folder of the binaries (default ./build/bin).
# COMPRESSION="fp16 powersgd" adds, per cap, `auto` with each of those sync.compression.method
# values (PowerSGD at rank PSGD_RANK, default 4): the compression column.
#
# Columns: samples/s (all nodes), bytes sent per node per iteration by the sync stages (measured,
# the start-up probe left out; the plan's prediction), seconds per iteration (measured: the
# metrics' steady_iteration_seconds, training time less the first iteration over the other
# iterations, mean over nodes; the planner's prediction), test accuracy (1,000 test images).
#
#   bash bench/compare.sh [LARGE_ITERATIONS] [DEMO_ITERATIONS] [CAPS]
#   (defaults 8, 400, "unlimited 1gbit 100mbit"; needs a built tree: scripts/build.sh)
#   sudo NETNS_RATE=10mbit bash bench/compare.sh 8 400 unlimited
#   (on real links: each node in its own network namespace, joined by tbf-shaped links of that
#   rate, ../shared/tools/netns-cluster.sh; the caps then come on top of the link)
set -euo pipefail
cd "$(dirname "$0")/.."
large_iterations=${1:-8}
demo_iterations=${2:-400}
caps=${3:-"unlimited 1gbit 100mbit"}
strategies="ps poseidon allreduce auto"
compression=${COMPRESSION:-}
bin=${GRADMESH_BIN:-./build/bin}
out=out/bench-compare
rm -rf "$out"
mkdir -p "$out"

if [[ -n ${NETNS_RATE:-} ]]; then
  export GRADMESH_NODE=$bin/gradmesh-node
  source bench/lib/netns_nodes.sh
  netns_up 4 "$NETNS_RATE"
  trap netns_down EXIT
fi

run() {  # run DIR NODES CONFIG ITERATIONS ARGS...
  local dir=$1 nodes=$2 config=$3 iterations=$4 codes
  shift 4
  echo "== $dir" >&2
  # The host's mode beside every run (bench/machine_state.h): compare figures within one.
  "$(dirname "$bin")/bench/bench_machine_state" >&2 || true
  if [[ -n ${NETNS_RATE:-} ]]; then
    codes=$(netns_nodes "$dir" "$nodes" "$config" --set job.max_iterations="$iterations" \
      --set data.test_limit=1000 "$@")
    [[ $codes =~ ^[0,]+$ ]] || { echo "exit codes $codes" >&2; tail -20 "$dir"/log-*.txt; exit 1; }
    return
  fi
  "$bin/gradmesh-launch" -n "$nodes" --config "$config" --metrics-out "$dir" \
    --set job.max_iterations="$iterations" --set data.test_limit=1000 "$@" > "$dir.log" 2>&1 ||
    { tail -20 "$dir.log"; exit 1; }
}

for cap in $caps; do
  for strategy in $strategies; do
    run "$out/large-$strategy-$cap" 4 configs/fashion-mnist-mlp-large.toml "$large_iterations" \
      --set sync.strategy=$strategy --set net.max_send_rate=$cap
  done
  for method in $compression; do
    run "$out/large-auto+$method-$cap" 4 configs/fashion-mnist-mlp-large.toml \
      "$large_iterations" --set sync.strategy=auto --set net.max_send_rate=$cap \
      --set sync.compression.method=$method --set sync.compression.rank="${PSGD_RANK:-4}"
  done
done
run "$out/demo-none" 1 configs/fashion-mnist-mlp.toml "$demo_iterations" --set sync.strategy=none
for strategy in $strategies; do
  run "$out/demo-$strategy" 4 configs/fashion-mnist-mlp.toml "$demo_iterations" \
    --set sync.strategy=$strategy
done

python3 - "$out" "$caps" "$strategies" "$compression" <<'PY'
import glob, json, os, sys
out, caps, strategies, compression = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), \
    sys.argv[4].split()

def load(name):
    return [json.load(open(p)) for p in sorted(glob.glob(f"{out}/{name}/node-*.json"))]

def row(label, cap, rows, method="none"):
    sps = sum(r["samples_per_second"] for r in rows)
    # The sync stages' bytes: the start-up probe's and the handshake's ("control") are not the plan's.
    measured_bytes = sum(sum(v for k, v in r["bytes_sent_by_stage"].items()
                             if k not in ("probe", "control")) / r["iterations"]
                         for r in rows) / len(rows)
    predicted_bytes = sum(r["sync"].get("predicted_bytes_sent", 0) for r in rows) / len(rows)
    # The steady state the planner predicts: the iterations after the first (which pays one-off
    # costs: first touch of buffers, the transport's first large writes).
    measured_s = sum(r["steady_iteration_seconds"] for r in rows) / len(rows)
    predicted_s = sum(r["sync"].get("predicted_iteration_seconds", 0) for r in rows) / len(rows)
    acc = sum(r["test_accuracy"] for r in rows) / len(rows)
    ratio = measured_s / predicted_s if predicted_s else float("nan")
    print(f"{label:10} {method:>11} {cap:>9} {sps:10.1f} {measured_bytes:12.0f} {predicted_bytes:12.0f} "
          f"{measured_s:9.4f} {predicted_s:9.4f} {ratio:6.2f} {acc * 100:6.2f}%")
    return sps

header = (f"{'strategy':10} {'compression':>11} {'cap':>9} {'samples/s':>10} {'B/iter':>12} {'B/iter pred':>12} "
          f"{'s/iter':>9} {'s pred':>9} {'meas/pred':>6} {'acc':>7}")
link = os.environ.get("NETNS_RATE")
where = f"network namespaces joined by {link} links" if link else "loopback"
print(f"large MLP (784-4096-4096-10), 4 nodes, {where}")
print(header)
for cap in caps:
    for s in strategies:
        row(s, cap, load(f"large-{s}-{cap}"))
    for m in compression:
        row("auto", cap, load(f"large-auto+{m}-{cap}"), m)
print("\ndemo MLP (784-256-256-10), uncapped" + (f", {link} links" if link else ""))
print(header)
single = row("none x1", "unlimited", load("demo-none"))
best = max(row(s, "unlimited", load(f"demo-{s}")) for s in strategies)
print(f"\nbest 4-node samples/s / one none node: {best / single:.2f}")
PY
