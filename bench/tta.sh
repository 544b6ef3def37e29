#!/usr/bin/env bash
# bench/tta.sh: time to a test accuracy for any strategy and compressor, on the same config, node
# count and evaluation schedule (one evaluation per epoch, on the first TEST_LIMIT test images).
# Ako's claim (SoCC'16 sec. 6, Fig. 10-11) and issue 28's (a compressor on slow links) are read
# from the same table.
#
# A run is STRATEGY or STRATEGY:METHOD (sync.compression.method; PowerSGD's rank from
# PSGD_RANK). For each run and seed it prints: the wall time (seconds from the first iteration,
# evaluations included: the metrics' epoch_wall_seconds, the slowest node) at which every
# replica's test accuracy first reached TARGET at an evaluation, that epoch; where no epoch's
# did but the final model does (after the stage's end-of-job exchange: ako's fold, local's
# average of replicas that trained apart), "end" and the wall time of that final evaluation (the
# metrics' wall_seconds); "-" if never. Then the mean replica accuracy at the end, the final
# model's accuracy (final_test_accuracy), samples/s of all nodes in their iterations
# (samples_per_second) and with the end-of-job exchange counted (samples / (train_seconds +
# finish_seconds): local's final average can take minutes on slow links). Then, medians over
# the seeds: each run's samples/s, ako's time over
# the best BSP run's (Ako: <= 0.75), and each compressed run's time and final accuracy against
# its strategy uncompressed (issue 28: at most half the time, within 0.5 points).
#
#   bash bench/tta.sh [CONFIG] [NODES] [EPOCHS] [AKO_EPOCHS]
#   (defaults configs/fashion-mnist-mlp.toml, 4, 3 for the BSP runs, 15 for ako, whose epochs at
#   the cap take a fraction of a BSP epoch's time; needs a built tree: scripts/build.sh)
#   RUNS="auto auto:fp16 auto:powersgd" SEEDS="1 2 3" sudo NETNS_RATE=100mbit bash bench/tta.sh \
#     configs/fashion-mnist-mlp-large.toml 4 2
#   (on real links: each node in its own network namespace joined by tbf-shaped links of that
#   rate, ../shared/tools/netns-cluster.sh; RATE is then not applied)
# Env: RUNS (default "ako ps poseidon allreduce auto"), SEEDS (job.seed values, default "42"),
#      RATE (net.max_send_rate, default 100mbit), NETNS_RATE, TARGET (default 0.84), TEST_LIMIT
#      (default 2000), PSGD_RANK (default 4), EXTRA (more --set options), OUT (default
#      out/bench-tta), GRADMESH_BIN (default ./build/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/fashion-mnist-mlp.toml}
nodes=${2:-4}
epochs=${3:-3}
ako_epochs=${4:-15}
rate=${RATE:-100mbit}
target=${TARGET:-0.84}
test_limit=${TEST_LIMIT:-2000}
runs=${RUNS:-"ako ps poseidon allreduce auto"}
seeds=${SEEDS:-42}
bin=${GRADMESH_BIN:-./build/bin}
out=${OUT:-out/bench-tta}
rm -rf "$out"
mkdir -p "$out"

if [[ -n ${NETNS_RATE:-} ]]; then
  export GRADMESH_NODE=$bin/gradmesh-node
  source bench/lib/netns_nodes.sh
  netns_up "$nodes" "$NETNS_RATE"
  trap netns_down EXIT
fi

for seed in $seeds; do
  for run in $runs; do
    strategy=${run%%:*} method=none
    [[ $run == *:* ]] && method=${run#*:}
    dir="$out/${run/:/-}-seed$seed"
    run_epochs=$epochs
    [[ $strategy == ako ]] && run_epochs=$ako_epochs
    echo "== $run, seed $seed ($run_epochs epochs)" >&2
    # The host's mode beside every run (bench/machine_state.h): compare figures within one.
    "$(dirname "$bin")/bench/bench_machine_state" >&2 || true
    args=(--set sync.strategy="$strategy" --set sync.compression.method="$method"
          --set sync.compression.rank="${PSGD_RANK:-4}" --set job.seed="$seed"
          --set job.epochs="$run_epochs" --set job.max_iterations=none
          --set data.test_limit="$test_limit")
    if [[ -n ${NETNS_RATE:-} ]]; then
      # shellcheck disable=SC2086
      codes=$(netns_nodes "$dir" "$nodes" "$config" "${args[@]}" ${EXTRA:-})
      [[ $codes =~ ^[0,]+$ ]] || { echo "exit codes $codes" >&2; tail -20 "$dir"/log-*.txt; exit 1; }
    else
      # shellcheck disable=SC2086
      "$bin/gradmesh-launch" -n "$nodes" --config "$config" --metrics-out "$dir" \
        "${args[@]}" --set net.max_send_rate="$rate" ${EXTRA:-} > "$dir.log" 2>&1 ||
        { tail -20 "$dir.log"; exit 1; }
    fi
  done
done

python3 - "$out" "$runs" "$seeds" "$target" "$config" "$nodes" "${NETNS_RATE:-}" "$rate" <<'PY'
import glob, json, statistics, sys
out, runs, seeds, target, config, nodes, netns, rate = sys.argv[1], sys.argv[2].split(), \
    sys.argv[3].split(), float(sys.argv[4]), *sys.argv[5:]
where = f"network namespaces joined by {netns} links" if netns else f"net.max_send_rate = {rate}"
print(f"{config}, {nodes} nodes, {where}, target {target * 100:.1f}%")
print(f"{'run':16} {'seed':>5} {'time to target':>15} {'epoch':>6} {'replicas (mean)':>16} "
      f"{'final':>7} {'samples/s':>10} {'with end':>9}")
times, finals, rates = {}, {}, {}
for run in runs:
    for seed in seeds:
        rows = [json.load(open(p))
                for p in sorted(glob.glob(f"{out}/{run.replace(':', '-')}-seed{seed}/node-*.json"))]
        # The first evaluation at which every replica is at the target: the slowest node's clock.
        reached = None
        for e in range(min(len(r["epoch_test_accuracy"]) for r in rows)):
            if all(r["epoch_test_accuracy"][e] >= target for r in rows):
                reached = (e + 1, max(r["epoch_wall_seconds"][e] for r in rows))
                break
        if reached is None and all(r["final_test_accuracy"] >= target for r in rows):
            reached = ("end", max(r["wall_seconds"] for r in rows))
        mean_replica = sum(r["test_accuracy"] for r in rows) / len(rows)
        final = sum(r["final_test_accuracy"] for r in rows) / len(rows)
        sps = sum(r["samples_per_second"] for r in rows)
        with_end = sum(r["samples"] / max(r["train_seconds"] + r["finish_seconds"], 1e-9)
                       for r in rows)
        times.setdefault(run, []).append(reached[1] if reached else float("inf"))
        finals.setdefault(run, []).append(final)
        rates.setdefault(run, []).append((sps, with_end))
        shown = f"{reached[1]:.1f} s" if reached else "-"
        epoch = str(reached[0]) if reached else "-"
        print(f"{run:16} {seed:>5} {shown:>15} {epoch:>6} {mean_replica * 100:15.2f}% "
              f"{final * 100:6.2f}% {sps:10.0f} {with_end:9.0f}")

median = {r: statistics.median(t) for r, t in times.items()}
final = {r: statistics.median(f) for r, f in finals.items()}
print(f"\nmedians over {len(seeds)} seed(s):")
for run in runs:
    shown = f"{median[run]:.1f} s" if median[run] != float("inf") else "never"
    print(f"{run}: time to {target * 100:.1f}% {shown}, final {final[run] * 100:.2f}%, samples/s "
          f"{statistics.median(s for s, _ in rates[run]):.0f} "
          f"({statistics.median(w for _, w in rates[run]):.0f} with the end-of-job exchange)")
bsp = {r: t for r, t in median.items() if not r.startswith("ako") and t != float("inf")}
if "ako" in median and bsp:
    best = min(bsp, key=bsp.get)
    print(f"ako / best BSP ({best}): {median['ako'] / bsp[best]:.2f} of the time to "
          f"{target * 100:.1f}%")
for run in runs:
    if ":" not in run or run.split(":")[0] not in median:
        continue
    base = run.split(":")[0]
    ratio = median[run] / median[base] if median[base] not in (0, float("inf")) else float("nan")
    print(f"{run} / {base}: {ratio:.2f} of the time to {target * 100:.1f}%, final accuracy "
          f"{(final[run] - final[base]) * 100:+.2f} points")
PY
