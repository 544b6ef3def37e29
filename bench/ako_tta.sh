#!/usr/bin/env bash
# Time to accuracy (Ako SoCC'16 sec. 6, Fig. 10-11): `ako` (p = auto) against the BSP strategies
# at one send cap, on the same config, node count and evaluation schedule (one evaluation per
# epoch, on the first TEST_LIMIT test images).
#
# For each strategy it prints: the wall time (seconds from the first iteration, evaluations
# included: the metrics' epoch_wall_seconds, the slowest node) at which the test accuracy first
# reached TARGET at an evaluation (every node's replica; "-" if never), the epoch that was, the
# mean replica accuracy at the end, the final model's accuracy (final_test_accuracy: for ako the
# model the job ends with, sync.ako.final), and samples/s of all nodes. Then ako's time over the
# best BSP strategy's (Ako's claim: 25% sooner, i.e. <= 0.75).
#
#   bash bench/ako_tta.sh [CONFIG] [NODES] [EPOCHS] [AKO_EPOCHS]
#   (defaults configs/fashion-mnist-mlp.toml, 4, 3 for the BSP strategies, 15 for ako, whose
#   epochs at the cap take a fraction of a BSP epoch's time; needs a built tree: scripts/build.sh)
# Env: RATE (default 100mbit), TARGET (default 0.84), TEST_LIMIT (default 2000),
#      STRATEGIES (default "ako ps poseidon allreduce auto"), EXTRA (more --set options),
#      OUT (default out/bench-ako-tta).
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/fashion-mnist-mlp.toml}
nodes=${2:-4}
epochs=${3:-3}
ako_epochs=${4:-15}
rate=${RATE:-100mbit}
target=${TARGET:-0.84}
test_limit=${TEST_LIMIT:-2000}
strategies=${STRATEGIES:-"ako ps poseidon allreduce auto"}
out=${OUT:-out/bench-ako-tta}
rm -rf "$out"
mkdir -p "$out"

for strategy in $strategies; do
  dir="$out/$strategy"
  run_epochs=$epochs
  [[ $strategy == ako ]] && run_epochs=$ako_epochs
  echo "== $strategy ($run_epochs epochs)" >&2
  # shellcheck disable=SC2086
  ./build/bin/gradmesh-launch -n "$nodes" --config "$config" --metrics-out "$dir" \
    --set sync.strategy="$strategy" --set net.max_send_rate="$rate" \
    --set job.epochs="$run_epochs" --set job.max_iterations=none --set data.test_limit="$test_limit" \
    ${EXTRA:-} > "$dir.log" 2>&1 || { tail -20 "$dir.log"; exit 1; }
done

python3 - "$out" "$strategies" "$target" "$config" "$nodes" "$rate" <<'PY'
import glob, json, sys
out, strategies, target, config, nodes, rate = sys.argv[1], sys.argv[2].split(), float(sys.argv[3]), *sys.argv[4:]
print(f"{config}, {nodes} nodes, net.max_send_rate = {rate}, target {target * 100:.1f}%")
print(f"{'strategy':10} {'time to target':>15} {'epoch':>6} {'replicas (mean)':>16} {'final':>7} {'samples/s':>10}")
times = {}
for s in strategies:
    rows = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/{s}/node-*.json"))]
    # The first evaluation at which every replica is at the target: the slowest node's clock.
    reached = None
    for e in range(min(len(r["epoch_test_accuracy"]) for r in rows)):
        if all(r["epoch_test_accuracy"][e] >= target for r in rows):
            reached = (e + 1, max(r["epoch_wall_seconds"][e] for r in rows))
            break
    mean_replica = sum(r["test_accuracy"] for r in rows) / len(rows)
    final = sum(r["final_test_accuracy"] for r in rows) / len(rows)
    sps = sum(r["samples_per_second"] for r in rows)
    if reached:
        times[s] = reached[1]
    shown = f"{reached[1]:.1f} s" if reached else "-"
    epoch = str(reached[0]) if reached else "-"
    print(f"{s:10} {shown:>15} {epoch:>6} {mean_replica * 100:15.2f}% {final * 100:6.2f}% {sps:10.0f}")
bsp = {s: t for s, t in times.items() if s != "ako"}
if "ako" in times and bsp:
    best = min(bsp, key=bsp.get)
    print(f"\nako / best BSP ({best}): {times['ako'] / bsp[best]:.2f} of the time to {target * 100:.1f}%")
PY
