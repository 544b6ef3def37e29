#!/usr/bin/env bash
# bench/simulate_check.sh: `gradmesh-node simulate` against real runs here (issue 58, "against
# runs here": simulate's samples/s within 20% of the measured median of 3 in at least 90% of
# cells). For each config, node count, link rate and run (auto, or auto:METHOD), REPEATS jobs of
# that many nodes in network namespaces joined by tbf links of that rate (bench/lib/
# netns_nodes.sh; "none": unshaped veth), then simulate for the same job from:
#   - a device profile of this host written under the nodes' load: `gradmesh-node profile` run
#     by as many processes at once as the job has nodes, each with the nodes' compute.threads
#     (a profile of one process alone would time the layers on cores the nodes share), and with
#     the cell's compressor (its codec times: PowerSGD's passes);
#   - the link the nodes' start-up probe measured (the median over the repeats of rank 0's
#     metrics alpha, bandwidth and message_overhead), as simulate takes links as given.
# Prints one row a cell: measured samples/s (median, all nodes: the sum of samples_per_second),
# simulate's, the nodes' own prediction (nodes x batch / the sync figure
# predicted_iteration_seconds), simulate / measured, and whether it is within 20%; then the
# share of cells within. The machine's state is printed before each cell.
#
#   sudo bash bench/simulate_check.sh
#   (needs root for the namespaces and a built tree)
# Env: ITERATIONS (a job's iterations by rate, default "none=300 1gbit=300 100mbit=100
#      10mbit=30": about half a minute a job or less), CONFIGS (default "configs/fashion-mnist-mlp.toml configs/fashion-mnist-mlp-large.toml
#      configs/fashion-mnist-cnn.toml"), NODES (default "2 3 4"), RATES (default "none 1gbit
#      100mbit 10mbit"), RUNS (default "auto"; auto:powersgd runs only at 100mbit and 10mbit, as
#      the issue asks), REPEATS (default 3), THREADS (compute.threads, default 1), OUT (default
#      out/bench-simulate-check), EXTRA (more --set options for every job and simulate).
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A iterations_at
iteration_spec=${ITERATIONS:-"none=300 1gbit=300 100mbit=100 10mbit=30"}
for pair in $iteration_spec; do
  iterations_at[${pair%%=*}]=${pair#*=}
done
configs=${CONFIGS:-"configs/fashion-mnist-mlp.toml configs/fashion-mnist-mlp-large.toml configs/fashion-mnist-cnn.toml"}
counts=${NODES:-"2 3 4"}
rates=${RATES:-"none 1gbit 100mbit 10mbit"}
runs=${RUNS:-"auto"}
repeats=${REPEATS:-3}
threads=${THREADS:-1}
out=${OUT:-out/bench-simulate-check}
node=./build/bin/gradmesh-node
export GRADMESH_NODE=$node
source bench/lib/netns_nodes.sh
trap netns_down EXIT
rm -rf "$out"
mkdir -p "$out"
rows="$out/rows.tsv"
: > "$rows"

# The profile of `config` for `n` nodes and compressor `method` under the nodes' load: n profiles
# at once, rank 0's kept (written once; its path printed). The compressor's own: a profile holds
# the codec times of the method it was written for, and simulate prices any other by the
# planner's assumed rates (PowerSGD's passes priced so read 1.24-1.29x high at 100 Mbit/s).
profile_for() { # config name n method
  local config=$1 name=$2 n=$3 method=$4
  local profile="$out/profile-$name-$n-$method.toml" pids=() r
  if [[ ! -f $profile ]]; then
    for ((r = 0; r < n; r++)); do
      "$node" profile --config "$config" -o "$out/profile-$name-$n-$method-$r.toml" --nodes "$n" \
        --set compute.threads="$threads" --set sync.compression.method="$method" ${EXTRA:-} \
        > "$out/profile-$name-$n-$method-$r.log" 2>&1 &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    cp "$out/profile-$name-$n-$method-0.toml" "$profile"
  fi
  echo "$profile"
}

for config in $configs; do
  name=$(basename "$config" .toml)
  for n in $counts; do
    for rate in $rates; do
      netns_up "$n" "$rate"
      for run in $runs; do
        method=none
        [[ $run == *:* ]] && method=${run#*:}
        if [[ $method != none && ( $rate == none || $rate == 1gbit ) ]]; then continue; fi
        profile=$(profile_for "$config" "$name" "$n" "$method")
        cell="$name n=$n $rate $run"
        echo "== $cell" >&2
        ./build/bench/bench_machine_state >&2 || true
        for ((k = 1; k <= repeats; k++)); do
          dir="$out/$name-$n-$rate-${run/:/-}-$k"
          codes=$(netns_nodes "$dir" "$n" "$config" --set sync.strategy=auto \
            --set sync.compression.method="$method" --set job.max_iterations="${iterations_at[$rate]:-100}" \
            --set compute.threads="$threads" --set data.test_limit=500 ${EXTRA:-})
          [[ $codes =~ ^[0,]+$ ]] || { echo "exit codes $codes" >&2; tail -n 5 "$dir"/log-*.txt; exit 1; }
        done
        # The link the probe measured (rank 0's figures, median over the repeats) for simulate.
        read -r alpha bandwidth overhead measured own < <(python3 - "$out" "$name-$n-$rate-${run/:/-}" "$repeats" <<'PY'
import glob, json, statistics, sys
out, stem, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
alpha, bw, o, sps, own = [], [], [], [], []
for k in range(1, repeats + 1):
    rows = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/{stem}-{k}/node-*.json"))]
    s = rows[0]["sync"]
    alpha.append(s["alpha"]); bw.append(s["bandwidth"]); o.append(s["message_overhead"])
    sps.append(sum(r["samples_per_second"] for r in rows))
    own.append(len(rows) * rows[0]["batch_size"] / s["predicted_iteration_seconds"])
m = statistics.median
print(m(alpha), m(bw), m(o), m(sps), m(own))
PY
)
        sim=$("$node" simulate --config "$config" --nodes "$n" --device "$profile" \
          --strategy auto --compression "$method" --json --set planner.alpha="$alpha" \
          --set planner.bandwidth="$bandwidth" --set planner.message_overhead="$overhead" \
          --set compute.threads="$threads" ${EXTRA:-} 2> "$out/simulate-$name-$n-$rate-${run/:/-}.log" |
          python3 -c 'import json,sys; print(json.load(sys.stdin)["runs"][0]["samples_per_second"])')
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$n" "$rate" "$run" "$measured" "$sim" "$own" >> "$rows"
      done
      netns_down
    done
  done
done

python3 - "$rows" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print(f"{'config':28} {'n':>2} {'link':>8} {'run':14} {'measured':>9} {'simulate':>9} "
      f"{'nodes own':>9} {'sim/meas':>8}  within 20%")
within = 0
for name, n, rate, run, measured, sim, own in rows:
    ratio = float(sim) / float(measured)
    ok = abs(ratio - 1) <= 0.2
    within += ok
    print(f"{name:28} {n:>2} {rate:>8} {run:14} {float(measured):9.0f} {float(sim):9.0f} "
          f"{float(own):9.0f} {ratio:8.2f}  {'yes' if ok else 'NO'}")
print(f"\n{within} of {len(rows)} cells within 20% ({100 * within / max(len(rows), 1):.0f}%; "
      "the issue asks >= 90%)")
PY
