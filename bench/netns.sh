#!/usr/bin/env bash
# bench/netns.sh: start-up and a few iterations on real links: 4 gradmesh-node processes, each in
# its own network namespace, joined by kernel-shaped (tbf) links of each RATE
# (../shared/tools/netns-cluster.sh; set NETNS_CLUSTER to use another copy). No net.max_send_rate:
# the link is slow, not a cap. Every strategy on the demo MLP (configs/fashion-mnist-mlp.toml),
# and auto and poseidon on the large MLP (configs/fashion-mnist-mlp-large.toml, 20M parameters),
# job.max_iterations = ITERATIONS each.
#
# Columns: link rate; config; strategy; exit codes (all 0 = started and finished); start-up,
# seconds from "listening on" to the first iteration (connect, link probe, compute profile, plan;
# the max over nodes; loading the data set before is not the network's); the link probe's seconds (max over nodes); B measured over
# the 12 links (min and max, bytes/s); the slowest link over the rate (1.00 = the probe read the
# link's rate); seconds per iteration after the first (mean over nodes); test accuracy.
#
#   sudo bash bench/netns.sh ["RATES"] [ITERATIONS] [CONFIGS]
#   (defaults "10mbit 1mbit", 5, "demo large"; RATE as netns-cluster.sh takes it: 1gbit, 100mbit,
#   10mbit, 1mbit, or none (unshaped veth); needs root, iproute2 and a built tree)
set -euo pipefail
cd "$(dirname "$0")/.."
rates=${1:-"10mbit 1mbit"}
iterations=${2:-5}
configs=${3:-"demo large"}
source bench/lib/netns_nodes.sh
netns_check || exit 2
nodes=4
out=${OUT:-out/bench-netns}
rm -rf "$out"
mkdir -p "$out"
trap netns_down EXIT

run() {  # run DIR CONFIG STRATEGY
  echo "== $1" >&2
  mkdir -p "$1"
  netns_nodes "$1" $nodes "$2" --set sync.strategy="$3" --set job.max_iterations="$iterations" \
    --set data.test_limit=1000 > "$1/codes"
}

for rate in $rates; do
  netns_up $nodes "$rate"
  for config in $configs; do
    if [ "$config" = large ]; then
      file=configs/fashion-mnist-mlp-large.toml strategies="auto poseidon"
    else
      file=configs/fashion-mnist-mlp.toml strategies="ps poseidon allreduce auto ako"  # none trains one node
    fi
    for strategy in $strategies; do run "$out/$rate-$config-$strategy" "$file" "$strategy"; done
  done
  netns_down
done

python3 - "$out" "$rates" "$configs" <<'PY'
import glob, json, os, re, sys
from datetime import datetime
out, rates, configs = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
unit = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}

def rate_bytes(rate):
    m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate.lower())
    return float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2]] / 8 if m else None

def stamp(line):
    m = re.search(r"\[(\d\d:\d\d:\d\d\.\d+)\]", line)
    return datetime.strptime(m[1], "%H:%M:%S.%f") if m else None

print(f"{'rate':>7} {'config':6} {'strategy':9} {'exit':8} {'start s':>8} {'probe s':>8} "
      f"{'B min':>10} {'B max':>10} {'min/rate':>8} {'s/iter':>8} {'acc':>7}")
for rate in rates:
    for config in configs:
        for d in sorted(glob.glob(f"{out}/{rate}-{config}-*")):
            strategy = d.rsplit("-", 1)[1]
            codes = open(f"{d}/codes").read().strip()
            start, probe, bws = [], [], []
            for log in sorted(glob.glob(f"{d}/log-*.txt")):
                lines = open(log, errors="replace").read().splitlines()
                first = next((stamp(l) for l in lines if "listening on" in l), None)
                began = next((stamp(l) for l in lines if "iterations in all" in l), None)
                if first and began:
                    start.append((began - first).total_seconds())
                for l in lines:
                    m = re.search(r"link probe took ([0-9.]+) s", l)
                    if m: probe.append(float(m[1]))
                    m = re.search(r"link to rank .*, B ([0-9.]+) (\w+)/s", l)
                    if m: bws.append(float(m[1]) * unit[m[2]])
            metrics = [json.load(open(p)) for p in glob.glob(f"{d}/node-*.json")]
            s_iter = (sum(m["steady_iteration_seconds"] for m in metrics) / len(metrics)
                      if metrics else float("nan"))
            acc = (sum(m["test_accuracy"] for m in metrics) / len(metrics) * 100
                   if metrics else float("nan"))
            link = rate_bytes(rate)
            ratio = f"{min(bws) / link:8.2f}" if bws and link else f"{'-':>8}"
            fmt = lambda xs, f: f(xs) if xs else float("nan")
            print(f"{rate:>7} {config:6} {strategy:9} {codes:8} {fmt(start, max):8.2f} "
                  f"{fmt(probe, max):8.2f} {fmt(bws, min):10.4g} {fmt(bws, max):10.4g} {ratio} "
                  f"{s_iter:8.3f} {acc:6.2f}%")
PY
