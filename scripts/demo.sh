#!/usr/bin/env bash
# The demo, from a fresh machine: installs the Debian packages it needs (scripts/setup.sh --demo:
# no fuzzing or plotting tools) and the Fashion-MNIST data set, builds the two binaries it runs
# (scripts/build.sh --demo: no tests, benchmarks or examples; CUDA kernels only for a visible GPU),
# and trains 4 local nodes with strategy `auto` for 3 epochs. Metrics go to out/demo/.
# Extra arguments are passed to gradmesh-launch (e.g. --set sync.strategy=ps --set job.epochs=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --demo
echo "demo: building gradmesh-node and gradmesh-launch (log: out-build.log)"
bash scripts/build.sh --demo > out-build.log 2>&1 || { tail -50 out-build.log; exit 1; }
rm -f out-build.log
./build/bin/gradmesh-launch -n 4 --config configs/fashion-mnist-mlp.toml --metrics-out out/demo "$@"
python3 - <<'PY' 2>/dev/null || true
import glob, json
rows = [json.load(open(p)) for p in sorted(glob.glob("out/demo/node-*.json"))]
if rows:
    m = rows[0]
    print(f"\n{len(rows)} nodes, strategy {m['strategy']}: test accuracy {m['test_accuracy']*100:.2f}%, "
          f"{sum(r['samples_per_second'] for r in rows):.0f} samples/s in all, "
          f"{sum(r['bytes_sent_per_iteration'] for r in rows)/len(rows):.0f} bytes sent per node per iteration "
          f"(metrics: out/demo/node-*.json)")
PY
