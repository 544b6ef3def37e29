#!/usr/bin/env bash
# bench/hybcomm.sh: strategy ps vs poseidon (HybComm) on 4 local nodes with the large MLP
# (configs/fashion-mnist-mlp-large.toml), with no send cap and with net.max_send_rate = 100mbit.
# Prints, per run: strategy, cap, samples/s (all nodes), measured bytes sent per node per
# iteration, the planner's prediction (payload + frame headers), and their ratio.
#
#   bash bench/hybcomm.sh [ITERATIONS]        (default 6; needs a built tree: scripts/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
iterations=${1:-6}
out=out/bench-hybcomm
rm -rf "$out"
mkdir -p "$out"
for cap in unlimited 100mbit; do
  for strategy in ps poseidon; do
    dir="$out/$strategy-$cap"
    echo "== $strategy, cap $cap, $iterations iterations" >&2
    ./build/bin/gradmesh-launch -n 4 --config configs/fashion-mnist-mlp-large.toml \
      --metrics-out "$dir" --set sync.strategy=$strategy --set job.max_iterations=$iterations \
      --set net.max_send_rate=$cap --set data.test_limit=1000 > "$dir.log" 2>&1 || { tail -20 "$dir.log"; exit 1; }
  done
done
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
print(f"{'strategy':9} {'cap':>9} {'samples/s':>10} {'measured B/node/iter':>21} {'predicted':>12} {'ratio':>6}")
for cap in ("unlimited", "100mbit"):
    for strategy in ("ps", "poseidon"):
        rows = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/{strategy}-{cap}/node-*.json"))]
        measured = sum(r["bytes_sent"] / r["iterations"] for r in rows) / len(rows)
        predicted = sum(sum(l["predicted_bytes_sent"] for l in r["plan"]) for r in rows) / len(rows)
        sps = sum(r["samples_per_second"] for r in rows)
        print(f"{strategy:9} {cap:>9} {sps:10.1f} {measured:21.0f} {predicted:12.0f} {measured / predicted:6.3f}")
PY
