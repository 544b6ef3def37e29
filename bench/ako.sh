#!/usr/bin/env bash
# Ako's constant-bandwidth property (Ako SoCC'16 sec. 3.2, eq. 3; Fig. 12b): with p = auto, each
# node's send rate should stay at the eq. 3 prediction gamma m (n - 1) / p (<= B) as n grows.
#
# Runs strategy ako with sync.ako.partitions = auto at net.max_send_rate = 100mbit on 2, 4 and 8
# local nodes and prints, per n: the final p, gamma (the probe's, at p1: mean over nodes), the
# per-node send rate measured while training at p (sync.measured_send_rate in the metrics JSON:
# wire bytes of the rounds at p over their time span, mean over nodes), the predicted rate
# gamma m (n - 1) / p, their ratio, and the test accuracy (mean over nodes). For context it also
# prints the gradient rate reached while training at p ("grad/s at p", mean over nodes), the
# measured rate over eq. 3's rate for that gradient rate, capped at B ("vs run": near 1 when the
# rounds went out as planned, so that a low ratio comes from gamma changing after the probe), and
# the whole job's average send rate (bytes_sent / wall_seconds: start-up, warm-up, evaluation and
# the final exchange included).
#
# Every epoch ends with an evaluation on the first 1,000 test images (data.test_limit; the test
# accuracy printed is on those): under the staleness bound a node that evaluates stalls its peers,
# and full 10,000-image evaluations (about 2 s at 8 nodes on 2 cores) made the steady gradient rate
# up to 20% lower than the probe's, which eq. 3 plans with. Extra --set options: EXTRA="...".
#
# Usage: bench/ako.sh [ITERATIONS] [NODES...]      (from the repository root, after a build)
#   ITERATIONS  job.max_iterations per node (default 3000; job.epochs is raised so it is reached)
#   NODES       node counts (default 2 4 8)
# Env: BUILD (default build), OUT (default /tmp/gradmesh-bench-ako), RATE (default 100mbit).
set -euo pipefail

iterations="${1:-3000}"
shift || true
nodes=("$@")
[[ ${#nodes[@]} -gt 0 ]] || nodes=(2 4 8)
build="${BUILD:-build}"
out="${OUT:-/tmp/gradmesh-bench-ako}"
rate="${RATE:-100mbit}"
config="configs/fashion-mnist-mlp-ako.toml"

for n in "${nodes[@]}"; do
  dir="$out/n$n"
  rm -rf "$dir"
  mkdir -p "$out"
  echo "== ako, $n nodes, p = auto, net.max_send_rate = $rate, $iterations iterations per node" >&2
  "$build/bin/gradmesh-launch" -n "$n" --config "$config" --metrics-out "$dir" \
    --set sync.ako.partitions=auto --set "net.max_send_rate=$rate" \
    --set "job.max_iterations=$iterations" --set job.epochs=1000 \
    --set data.test_limit=1000 ${EXTRA:-} > "$dir.log" 2>&1 ||
    { echo "run with $n nodes failed; see $dir.log" >&2; tail -20 "$dir.log" >&2; exit 1; }
done

python3 - "$out" "${nodes[@]}" <<'PY'
import json, sys
from pathlib import Path

out, counts = Path(sys.argv[1]), [int(n) for n in sys.argv[2:]]
print(f"{'n':>3} {'p':>4} {'gamma/s':>8} {'measured MB/s':>14} {'predicted MB/s':>15} "
      f"{'ratio':>6} {'B MB/s':>7} {'test acc':>9} {'grad/s at p':>12} {'vs run':>7} "
      f"{'job avg MB/s':>13}")
for n in counts:
    nodes = [json.loads((out / f"n{n}" / f"node-{r}.json").read_text()) for r in range(n)]
    s = nodes[0]["sync"]
    measured = sum(m["sync"]["measured_send_rate"] for m in nodes) / n
    predicted = s["predicted_send_rate"]
    accuracy = sum(m["test_accuracy"] for m in nodes) / n
    gamma_run = sum(m["sync"]["measured_gamma"] for m in nodes) / n
    job_avg = sum(m["bytes_sent"] / m["wall_seconds"] for m in nodes) / n
    # eq. 3's rate for the gradient rate the run actually reached, at most B: separates a
    # mispredicted gamma (ratio low, "vs run" near 1) from rounds that did not go out.
    at_run_gamma = min(s["bandwidth"], gamma_run * s["model_bytes"] * (n - 1) / s["partitions"])
    print(f"{n:>3} {int(s['partitions']):>4} {s['gamma']:>8.1f} {measured / 1e6:>14.3f} "
          f"{predicted / 1e6:>15.3f} {measured / predicted:>6.3f} {s['bandwidth'] / 1e6:>7.2f} "
          f"{100 * accuracy:>8.2f}% {gamma_run:>12.1f} {measured / at_run_gamma:>7.3f} "
          f"{job_avg / 1e6:>13.3f}")
PY
