#!/usr/bin/env bash
# bench/synthetic.sh: images/s on synthetic ResNet-18 (configs/synthetic-resnet18.toml: 3x64x64
# random images, 100 classes, 11.2M parameters; data.dataset = "synthetic", no files) for 1, 2 and
# 4 nodes per strategy, uncapped and at 1gbit, with the scaling efficiency: images/s at n nodes
# over n x images/s of one node alone (strategy none) -- the table Horovod's README leads with
# (its synthetic benchmark: ResNet on random images, images/s and scaling efficiency).
#
#   bash bench/synthetic.sh [ITERATIONS] [STRATEGIES] [NODES] [CAPS]
#   (defaults 12, "allreduce ps auto", "1 2 4", "unlimited 1gbit"; needs a built tree:
#   scripts/build.sh)
#   CONFIG=configs/fashion-mnist-resnet.toml bash bench/synthetic.sh   (another model)
#   DEVICE=cuda bash bench/synthetic.sh                                  (compute.device)
#   sudo NETNS_RATE=1gbit bash bench/synthetic.sh 12 "allreduce auto" "1 2 4" unlimited
#   (on real links: each node in its own network namespace, joined by tbf-shaped links of that
#   rate, ../shared/tools/netns-cluster.sh; the caps then come on top of the link)
#
# images/s = nodes x batch / the nodes' mean steady_iteration_seconds (the iterations after the
# first, which pays one-off costs). The nodes share this machine's cores (compute.threads 0
# divides them among the nodes; network namespaces shape only the links), so the efficiency
# measures that sharing as much as the network, and the table says so. GRADMESH_BIN names the binaries' folder (./build/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
iterations=${1:-12}
strategies=${2:-"allreduce ps auto"}
node_counts=${3:-"1 2 4"}
caps=${4:-"unlimited 1gbit"}
config=${CONFIG:-configs/synthetic-resnet18.toml}
device=${DEVICE:-cpu}
bin=${GRADMESH_BIN:-./build/bin}
out=out/bench-synthetic
rm -rf "$out"
mkdir -p "$out"
most=1
for n in $node_counts; do ((n > most)) && most=$n; done

if [[ -n ${NETNS_RATE:-} ]]; then
  export GRADMESH_NODE=$bin/gradmesh-node
  source bench/lib/netns_nodes.sh
  netns_up "$most" "$NETNS_RATE"
  trap netns_down EXIT
fi

run() {  # run DIR NODES ARGS...
  local dir=$1 nodes=$2 codes
  shift 2
  echo "== $dir" >&2
  # The host's mode beside every run (bench/machine_state.h): compare figures within one.
  "$(dirname "$bin")/bench/bench_machine_state" >&2 || true
  local args=(--set job.max_iterations="$iterations" --set compute.device="$device" "$@")
  if [[ -n ${NETNS_RATE:-} && $nodes -gt 1 ]]; then
    codes=$(netns_nodes "$dir" "$nodes" "$config" "${args[@]}")
    [[ $codes =~ ^[0,]+$ ]] || { echo "exit codes $codes" >&2; tail -20 "$dir"/log-*.txt; exit 1; }
    return
  fi
  "$bin/gradmesh-launch" -n "$nodes" --config "$config" --metrics-out "$dir" "${args[@]}" \
    > "$dir.log" 2>&1 || { tail -20 "$dir.log"; exit 1; }
}

run "$out/none-1" 1 --set sync.strategy=none
for cap in $caps; do
  for strategy in $strategies; do
    for n in $node_counts; do
      ((n > 1)) || continue
      run "$out/$strategy-$n-$cap" "$n" --set sync.strategy="$strategy" \
        --set net.max_send_rate="$cap"
    done
  done
done

python3 - "$out" "$strategies" "$node_counts" "$caps" "$config" "$device" <<'PY'
import glob, json, os, sys
out, strategies, counts, caps, config, device = sys.argv[1], sys.argv[2].split(), \
    [int(n) for n in sys.argv[3].split()], sys.argv[4].split(), sys.argv[5], sys.argv[6]

def images_per_second(name):
    rows = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/{name}/node-*.json"))]
    if not rows:
        raise SystemExit(f"no metrics in {out}/{name}")
    steady = sum(r["steady_iteration_seconds"] for r in rows) / len(rows)
    return len(rows) * rows[0]["batch_size"] / steady, rows

single, rows = images_per_second("none-1")
link = os.environ.get("NETNS_RATE")
cores = os.cpu_count() or 1
print(f"{config}, {rows[0]['parameters']:,} parameters, batch {rows[0]['batch_size']} a node, "
      f"compute.device {device}, {'network namespaces joined by ' + link + ' links' if link else 'loopback'}, "
      f"{cores} cores")
print(f"1 node (none): {single:.1f} images/s")
print(f"{'strategy':10} {'cap':>9}" + "".join(f"{f'{n} nodes':>12} {'eff.':>6}" for n in counts if n > 1))
for cap in caps:
    for s in strategies:
        cells = ""
        for n in counts:
            if n == 1:
                continue
            rate, _ = images_per_second(f"{s}-{n}-{cap}")
            cells += f"{rate:12.1f} {100 * rate / (n * single):5.0f}%"
        print(f"{s:10} {cap:>9}{cells}")
if max(counts) > 1:
    print(f"note: the nodes run on this one machine ({cores} cores; network namespaces shape the "
          "links, not the compute): n nodes share the cores one node had to itself, so the "
          "efficiency measures that sharing as much as the network; Horovod's table has a GPU a "
          "node")
PY
