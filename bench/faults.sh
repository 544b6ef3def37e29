#!/usr/bin/env bash
# What a failed peer costs (issue 13's benchmark, the parts that exist): NODES local gradmesh-node
# processes on 127.0.0.1, one of them (the last rank) sent SIGKILL (gone) or SIGSTOP (hung: its
# sockets stay open, only net.peer_timeout's heartbeats tell) during its first epoch.
#
# For `ako` it prints, per run: how long after the signal the survivors dropped the peer and went
# on (the "going on with" log line, the slowest survivor; their staleness gates open at that
# moment), the survivors' mean test accuracy (their replicas) and final-model accuracy, against
# an undisturbed run of the same config. For `ps` (BSP, checkpoint.dir set, a checkpoint every
# CKPT_EVERY iterations) it prints how long after the signal the survivors had rolled back and
# started again as a job of n - 1 (the "iterations in all" line of the new view, the slowest
# survivor), and their accuracy at the end against an undisturbed `ps` run.
#
# Then `ako` with the killed node restarted with --rejoin once the survivors went on (REJOIN_EPOCHS
# epochs, so the restarted process has time to load the data and rejoin): the time from the
# restart to its "rejoined from rank" line (start-up included) and from its connection to it (the
# rejoin itself), and the 4 nodes' final model against an undisturbed run of as many epochs.
# Then `ps` with the killed node restarted with --rejoin once the survivors rolled back: the time
# from the restart to the survivors' checkpoint boundary that admitted it (their "rejoined at the
# checkpoint" line), from there to the grown view's first iteration, and the accuracy at the end.
#
#   bash bench/faults.sh [CONFIG] [NODES]
#   (defaults configs/fashion-mnist-mlp-ako.toml, 4; needs a built tree: scripts/build.sh)
# Last, the checkpoint of the large MLP (LARGE_CONFIG): NODES nodes under ps, a checkpoint every
# 4 of 12 iterations; its size per node, the iteration's wait and the background write.
# The 10-minute soak (resident memory, no hang) is bench/soak.sh.
# Env: PEER_TIMEOUT (net.peer_timeout for the SIGSTOP runs, default 2), TEST_LIMIT (default 2000),
#      CKPT_EVERY (default 200), REJOIN_EPOCHS (default 12), OUT (default out/bench-faults),
#      LARGE_CONFIG (default configs/fashion-mnist-mlp-large.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/fashion-mnist-mlp-ako.toml}
nodes=${2:-4}
peer_timeout=${PEER_TIMEOUT:-2}
test_limit=${TEST_LIMIT:-2000}
ckpt_every=${CKPT_EVERY:-200}
rejoin_epochs=${REJOIN_EPOCHS:-12}
large_config=${LARGE_CONFIG:-configs/fashion-mnist-mlp-large.toml}
out=${OUT:-out/bench-faults}
rm -rf "$out"
mkdir -p "$out"
victim=$((nodes - 1))

free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(",".join(f"127.0.0.1:{s.getsockname()[1]}" for s in socks))
for s in socks: s.close()
PY
}

now() { python3 -c 'import time; print(f"{time.time():.3f}")'; }

# run NAME STRATEGY SIGNAL(none|KILL|STOP|REJOIN) [EPOCHS]: NODES processes; the victim gets SIGNAL
# during its first epoch (REJOIN: SIGKILL, then it is started again with --rejoin once rank 0 has
# gone on without it). Writes $out/NAME/{log-R.txt,node-R.json,signal_at[,restart_at]}.
run() {
  local name=$1 strategy=$2 signal=$3 dir="$out/$1"
  mkdir -p "$dir"
  local extra=()
  if [[ $strategy != ako ]]; then
    extra=(--set checkpoint.dir="$dir/ckpt" --set checkpoint.every="$ckpt_every")
  fi
  if [[ -n ${4:-} ]]; then extra+=(--set job.epochs="$4"); fi
  local peers
  peers=$(free_ports "$nodes")
  local pids=()
  for ((r = 0; r < nodes; r++)); do
    ./build/bin/gradmesh-node --config "$config" --peers "$peers" --rank "$r" \
      --metrics-out "$dir" --set sync.strategy="$strategy" --set data.test_limit="$test_limit" \
      --set net.peer_timeout="$peer_timeout" "${extra[@]}" > "$dir/log-$r.txt" 2>&1 &
    pids+=($!)
  done
  if [[ $signal != none ]]; then
    local mark="epoch 1/"
    [[ $strategy != ako ]] && mark="checkpoint of iteration $ckpt_every:"
    until grep -q "$mark" "$dir/log-$victim.txt" 2>/dev/null; do sleep 0.05; done
    now > "$dir/signal_at"
    if [[ $signal == REJOIN ]]; then
      kill -KILL "${pids[$victim]}"
      wait "${pids[$victim]}" 2>/dev/null || true
      until grep -q "going on with" "$dir/log-0.txt" 2>/dev/null; do sleep 0.05; done
      now > "$dir/restart_at"
      ./build/bin/gradmesh-node --config "$config" --peers "$peers" --rank "$victim" \
        --metrics-out "$dir" --set sync.strategy="$strategy" --set data.test_limit="$test_limit" \
        --set net.peer_timeout="$peer_timeout" "${extra[@]}" --rejoin \
        > "$dir/log-$victim-rejoined.txt" 2>&1 &
      pids[$victim]=$!
      signal=none  # waited for below like the others
    else
      kill -"$signal" "${pids[$victim]}"
    fi
  fi
  for ((r = 0; r < nodes; r++)); do
    if [[ $signal != none && $r == "$victim" ]]; then continue; fi
    wait "${pids[$r]}" || echo "   (rank $r exited $?)" >&2
  done
  if [[ $signal != none ]]; then kill -KILL "${pids[$victim]}" 2>/dev/null || true; fi
  wait 2>/dev/null || true
}

echo "== ako undisturbed" >&2;  run ako-undisturbed ako none
echo "== ako, SIGKILL" >&2;     run ako-kill ako KILL
echo "== ako, SIGSTOP" >&2;     run ako-stop ako STOP
echo "== ps undisturbed" >&2;  run ps-undisturbed ps none
echo "== ps, SIGKILL" >&2;      run ps-kill ps KILL
echo "== ps, SIGSTOP" >&2;      run ps-stop ps STOP
echo "== ako undisturbed, $rejoin_epochs epochs" >&2; run ako-long ako none "$rejoin_epochs"
echo "== ako, SIGKILL, restarted with --rejoin" >&2;   run ako-rejoin ako REJOIN "$rejoin_epochs"
echo "== ps, SIGKILL, restarted with --rejoin" >&2;    run ps-rejoin ps REJOIN

# The large MLP's checkpoint: NODES nodes, ps, a checkpoint every 4 iterations, 12 iterations.
echo "== checkpoints of $large_config" >&2
large_peers=$(free_ports "$nodes")
mkdir -p "$out/checkpoint"
large_pids=()
for ((r = 0; r < nodes; r++)); do
  ./build/bin/gradmesh-node --config "$large_config" --peers "$large_peers" --rank "$r" \
    --metrics-out "$out/checkpoint" --set sync.strategy=ps --set data.test_limit=200 \
    --set job.max_iterations=12 --set checkpoint.every=4 \
    --set checkpoint.dir="$out/checkpoint/ckpt" > "$out/checkpoint/log-$r.txt" 2>&1 &
  large_pids+=($!)
done
for pid in "${large_pids[@]}"; do wait "$pid" || echo "   (a checkpoint run node exited $?)" >&2; done
rm -rf "$out/checkpoint/ckpt"

python3 - "$out" "$nodes" "$victim" "$config" "$peer_timeout" <<'PY'
import datetime, glob, json, os, re, sys
out, nodes, victim, config, peer_timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]

def stamp(line, day):
    # "[HH:MM:SS.mmm] [rank r] ..." (the local date of the run)
    m = re.search(r"\[(\d\d):(\d\d):(\d\d)\.(\d\d\d)\]", line)
    if not m: return None
    h, mi, s, ms = map(int, m.groups())
    return datetime.datetime.combine(day, datetime.time(h, mi, s, ms * 1000)).timestamp()

def first_time(path, text, day):
    for line in open(path, errors="replace"):
        if text in line:
            return stamp(line, day)
    return None

def survivors(name):
    return [r for r in range(nodes) if not (name != "ako-undisturbed" and r == victim)]

def metrics(name, ranks):
    rows = []
    for r in ranks:
        p = f"{out}/{name}/node-{r}.json"
        if os.path.exists(p): rows.append(json.load(open(p)))
    return rows

print(f"{config}, {nodes} nodes on 127.0.0.1, rank {victim} signalled during its first epoch; "
      f"net.peer_timeout = {peer_timeout} s for every run")
base = metrics("ako-undisturbed", range(nodes))
base_acc = sum(r["test_accuracy"] for r in base) / len(base)
base_final = sum(r["final_test_accuracy"] for r in base) / len(base)
print(f"{'run':16} {'survivors go on':>16} {'replicas':>9} {'final':>7}  (undisturbed: replicas "
      f"{100 * base_acc:.2f}%, final {100 * base_final:.2f}%)")
for name in ("ako-kill", "ako-stop"):
    at = float(open(f"{out}/{name}/signal_at").read())
    day = datetime.datetime.fromtimestamp(at).date()
    went_on = [first_time(f"{out}/{name}/log-{r}.txt", "going on with", day) for r in survivors(name)]
    latency = "-" if None in went_on else f"{max(went_on) - at:.2f} s"
    rows = metrics(name, survivors(name))
    acc = sum(r["test_accuracy"] for r in rows) / max(1, len(rows))
    final = sum(r["final_test_accuracy"] for r in rows) / max(1, len(rows))
    print(f"{name:16} {latency:>16} {100 * acc:8.2f}% {100 * final:6.2f}%  "
          f"({len(rows)} of {nodes - 1} survivors finished; vs undisturbed: "
          f"{100 * (acc - base_acc):+.2f} points)")
ps_base = metrics("ps-undisturbed", range(nodes))
ps_acc = sum(r["test_accuracy"] for r in ps_base) / len(ps_base)
print(f"{'run':16} {'rolled back, on':>16} {'accuracy':>9} {'from':>6}  (undisturbed ps: "
      f"{100 * ps_acc:.2f}%)")
for name in ("ps-kill", "ps-stop"):
    at = float(open(f"{out}/{name}/signal_at").read())
    day = datetime.datetime.fromtimestamp(at).date()
    going = []
    for r in survivors(name):
        t = None
        for line in open(f"{out}/{name}/log-{r}.txt", errors="replace"):
            if "iterations in all" in line:
                t = stamp(line, day)  # the last one: the new view's start
        going.append(t)
    latency = "-" if None in going or min(going) < at else f"{max(going) - at:.2f} s"
    rows = metrics(name, range(nodes - 1))  # the new view's ranks 0 .. n-2
    acc = sum(r["test_accuracy"] for r in rows) / max(1, len(rows))
    start = rows[0].get("resumed_from_iteration") if rows else None
    print(f"{name:16} {latency:>16} {100 * acc:8.2f}% {start if start is not None else '-':>6}  "
          f"({len(rows)} of {nodes - 1} survivors finished, rollbacks "
          f"{[r.get('rollbacks') for r in rows]}; vs undisturbed: {100 * (acc - ps_acc):+.2f} points)")
long = metrics("ako-long", range(nodes))
long_final = sum(r["final_test_accuracy"] for r in long) / len(long)
name = "ako-rejoin"
restart = float(open(f"{out}/{name}/restart_at").read())
signal_at = float(open(f"{out}/{name}/signal_at").read())
day = datetime.datetime.fromtimestamp(restart).date()
log = f"{out}/{name}/log-{victim}-rejoined.txt"
rejoined = first_time(log, "rejoined from rank", day)
connected = first_time(log, "connected to every peer", day)
rows = metrics(name, range(nodes))
final = sum(r["final_test_accuracy"] for r in rows) / max(1, len(rows))
same = len({r["final_test_accuracy"] for r in rows}) == 1
joiner = rows[victim] if len(rows) == nodes else {}
print(f"{'run':16} {'restart->rejoined':>18} {'connect->rejoined':>18} {'final':>7}  (undisturbed "
      f"ako, as many epochs: final {100 * long_final:.2f}%)")
print(f"{name:16} {(f'{rejoined - restart:.2f} s' if rejoined else '-'):>18} "
      f"{(f'{rejoined - connected:.2f} s' if rejoined and connected else '-'):>18} "
      f"{100 * final:6.2f}%  ({len(rows)} of {nodes} finished, final model the same on all: {same}; "
      f"restarted {restart - signal_at:.2f} s after the kill; it took over at iteration "
      f"{joiner.get('resumed_from_iteration')}; vs undisturbed: {100 * (final - long_final):+.2f} points)")
name = "ps-rejoin"
restart = float(open(f"{out}/{name}/restart_at").read())
day = datetime.datetime.fromtimestamp(restart).date()
admitted = first_time(f"{out}/{name}/log-0.txt", "node(s) rejoined at the checkpoint", day)
going = None
for line in open(f"{out}/{name}/log-{victim}-rejoined.txt", errors="replace"):
    if "iterations in all" in line:
        going = stamp(line, day)
rows = metrics(name, range(nodes))
acc = sum(r["test_accuracy"] for r in rows) / max(1, len(rows))
same = len({r["test_accuracy"] for r in rows}) == 1
print(f"{'run':16} {'restart->admitted':>18} {'admitted->going':>18} {'accuracy':>9}  (undisturbed "
      f"ps: {100 * ps_acc:.2f}%)")
print(f"{name:16} {(f'{admitted - restart:.2f} s' if admitted else '-'):>18} "
      f"{(f'{going - admitted:.2f} s' if going and admitted else '-'):>18} {100 * acc:8.2f}%  "
      f"({len(rows)} of {nodes} finished, the same accuracy on all: {same}; views "
      f"{[r.get('view') for r in rows]}, rejoined {[r.get('rejoined') for r in rows]}; vs "
      f"undisturbed: {100 * (acc - ps_acc):+.2f} points)")
rows = metrics("checkpoint", range(nodes))
if rows:
    def span(values, fmt):
        return fmt.format(min(values)) + ("" if min(values) == max(values) else "-" + fmt.format(max(values)))
    n = [max(1, r["checkpoints_written"]) for r in rows]
    print(f"checkpoints of the large MLP (ps, {nodes} nodes, one every 4 of 12 iterations): "
          f"{span([r['checkpoint_bytes'] / 1e6 for r in rows], '{:.1f}')} MB per node; the "
          f"iteration waits {span([1e3 * r['checkpoint_seconds'] / k for r, k in zip(rows, n)], '{:.0f}')} ms "
          f"per checkpoint (the copy; the first touches the buffer), the background write takes "
          f"{span([1e3 * r['checkpoint_write_seconds'] / k for r, k in zip(rows, n)], '{:.0f}')} ms "
          f"(write, fsync, rename; {len(rows)} of {nodes} nodes, {rows[0]['checkpoints_written']} "
          f"checkpoints each)")
else:
    print("checkpoints of the large MLP: no metrics (see the checkpoint run's logs)")
PY
