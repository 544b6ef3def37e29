#!/usr/bin/env bash
# What a failed peer costs (issue 13's benchmark, the parts that exist): NODES local gradmesh-node
# processes on 127.0.0.1, one of them (the last rank) sent SIGKILL (gone) or SIGSTOP (hung: its
# sockets stay open, only net.peer_timeout's heartbeats tell) during its first epoch.
#
# For `ako` it prints, per run: how long after the signal the survivors dropped the peer and went
# on (the "going on with" log line, the slowest survivor; their staleness gates open at that
# moment), the survivors' mean test accuracy (their replicas) and final-model accuracy, against
# an undisturbed run of the same config. For `ps` (BSP) it prints how long the survivors took to
# exit naming the peer: rollback to a checkpoint and going on with n - 1 is not built yet.
#
#   bash bench/faults.sh [CONFIG] [NODES]
#   (defaults configs/fashion-mnist-mlp-ako.toml, 4; needs a built tree: scripts/build.sh)
# Env: PEER_TIMEOUT (net.peer_timeout for the SIGSTOP runs, default 2), TEST_LIMIT (default 2000),
#      OUT (default out/bench-faults).
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/fashion-mnist-mlp-ako.toml}
nodes=${2:-4}
peer_timeout=${PEER_TIMEOUT:-2}
test_limit=${TEST_LIMIT:-2000}
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

# run NAME STRATEGY SIGNAL(none|KILL|STOP): NODES processes; the victim gets SIGNAL during its first
# epoch. Writes $out/NAME/{log-R.txt,node-R.json,signal_at}.
run() {
  local name=$1 strategy=$2 signal=$3 dir="$out/$1"
  mkdir -p "$dir"
  local peers
  peers=$(free_ports "$nodes")
  local pids=()
  for ((r = 0; r < nodes; r++)); do
    ./build/bin/gradmesh-node --config "$config" --peers "$peers" --rank "$r" \
      --metrics-out "$dir" --set sync.strategy="$strategy" --set data.test_limit="$test_limit" \
      --set net.peer_timeout="$peer_timeout" > "$dir/log-$r.txt" 2>&1 &
    pids+=($!)
  done
  if [[ $signal != none ]]; then
    until grep -q "epoch 1/" "$dir/log-$victim.txt" 2>/dev/null; do sleep 0.05; done
    python3 -c 'import time; print(f"{time.time():.3f}")' > "$dir/signal_at"
    kill -"$signal" "${pids[$victim]}"
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
echo "== ps, SIGKILL" >&2;      run ps-kill ps KILL
echo "== ps, SIGSTOP" >&2;      run ps-stop ps STOP

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
for name in ("ps-kill", "ps-stop"):
    at = float(open(f"{out}/{name}/signal_at").read())
    day = datetime.datetime.fromtimestamp(at).date()
    named = f"peer rank {victim} ("
    stops = []
    for r in survivors(name):
        log = f"{out}/{name}/log-{r}.txt"
        t = None
        for line in open(log, errors="replace"):
            if "[error]" in line and named in line:
                t = stamp(line, day)
        stops.append(t)
    latency = "-" if None in stops else f"{max(stops) - at:.2f} s"
    print(f"{name:16} survivors exit naming the peer after {latency} (BSP: no rollback yet)")
PY
