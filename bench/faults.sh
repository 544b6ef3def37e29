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
# Then the partition cases: `ako` and `ps` with the victim SIGSTOPped until the others have gone
# on without it, then woken (SIGCONT): it sees every peer gone. Printed: every rank's exit status,
# whether the woken one wrote a metrics file, and its error line (it must stop, naming the cut,
# and write nothing: sync::Quorum). Then the stalled handshakes: while a `ps` job runs, 1,000
# connections to rank 0 each send a frame prefix announcing a large header (half 1 MiB, half
# 4,000 bytes) and stall, and 20 send nothing: rank 0's resident memory before and at its peak,
# how many of the connections the node closed and how soon, and whether the job's parameters are
# bitwise those of the undisturbed `ps` run.
# Last, the checkpoint of the large MLP (LARGE_CONFIG): NODES nodes under ps, a checkpoint every
# 4 of 12 iterations; its size per node, the iteration's wait and the background write.
# The 10-minute soak (resident memory, no hang) is bench/soak.sh.
# Env: PEER_TIMEOUT (net.peer_timeout for the SIGSTOP runs, default 2), TEST_LIMIT (default 2000),
#      CKPT_EVERY (default 200), REJOIN_EPOCHS (default 12), OUT (default out/bench-faults),
#      LARGE_CONFIG (default configs/fashion-mnist-mlp-large.toml), CASES (default all: the words
#      failures rejoin partition handshake checkpoint, space-separated; `ps undisturbed` runs with
#      any of failures, rejoin or handshake, `ako undisturbed` with failures).
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
cases=${CASES:-failures rejoin partition handshake checkpoint}
want() { [[ " $cases " == *" $1 "* ]]; }
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

# run NAME STRATEGY SIGNAL(none|KILL|STOP|REJOIN|PAUSE|FLOOD) [EPOCHS]: NODES processes; the victim
# gets SIGNAL during its first epoch (REJOIN: SIGKILL, then it is started again with --rejoin once
# rank 0 has gone on without it; PAUSE: SIGSTOP until rank 0 has gone on without it, then
# net.peer_timeout + 1 s more, then SIGCONT; FLOOD: no signal, the stalled handshakes at rank 0).
# Writes $out/NAME/{log-R.txt,node-R.json,parameters-R.f32,exit-R,signal_at[,restart_at]}.
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
      --metrics-out "$dir" --save-parameters --set sync.strategy="$strategy" \
      --set data.test_limit="$test_limit" --set net.peer_timeout="$peer_timeout" "${extra[@]}" \
      > "$dir/log-$r.txt" 2>&1 &
    pids+=($!)
  done
  if [[ $signal == FLOOD ]]; then
    until grep -q "epoch 1/" "$dir/log-0.txt" 2>/dev/null; do sleep 0.05; done
    python3 bench/lib/stalled_handshakes.py "${peers%%,*}" "${pids[0]}" > "$dir/flood.json"
    signal=none
  fi
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
    elif [[ $signal == PAUSE ]]; then
      kill -STOP "${pids[$victim]}"
      local gone="going on with"
      [[ $strategy != ako ]] && gone="rolling back"
      until grep -q "$gone" "$dir/log-0.txt" 2>/dev/null; do sleep 0.05; done
      sleep "$(python3 -c "print($peer_timeout + 1)")"
      now > "$dir/wake_at"
      kill -CONT "${pids[$victim]}"
      signal=none  # waited for below like the others
    else
      kill -"$signal" "${pids[$victim]}"
    fi
  fi
  for ((r = 0; r < nodes; r++)); do
    if [[ $signal != none && $r == "$victim" ]]; then continue; fi
    local code=0
    wait "${pids[$r]}" || code=$?
    echo "$code" > "$dir/exit-$r"
    [[ $code == 0 ]] || echo "   (rank $r exited $code)" >&2
  done
  if [[ $signal != none ]]; then kill -KILL "${pids[$victim]}" 2>/dev/null || true; fi
  wait 2>/dev/null || true
}

if want failures; then
  echo "== ako undisturbed" >&2;  run ako-undisturbed ako none
  echo "== ako, SIGKILL" >&2;     run ako-kill ako KILL
  echo "== ako, SIGSTOP" >&2;     run ako-stop ako STOP
fi
if want failures || want rejoin || want handshake; then
  echo "== ps undisturbed" >&2;  run ps-undisturbed ps none
fi
if want failures; then
  echo "== ps, SIGKILL" >&2;      run ps-kill ps KILL
  echo "== ps, SIGSTOP" >&2;      run ps-stop ps STOP
fi
if want rejoin; then
  echo "== ako undisturbed, $rejoin_epochs epochs" >&2; run ako-long ako none "$rejoin_epochs"
  echo "== ako, SIGKILL, restarted with --rejoin" >&2;   run ako-rejoin ako REJOIN "$rejoin_epochs"
  echo "== ps, SIGKILL, restarted with --rejoin" >&2;    run ps-rejoin ps REJOIN
fi
if want partition; then
  echo "== ako, SIGSTOP past net.peer_timeout, then woken" >&2; run ako-partition ako PAUSE
  echo "== ps, SIGSTOP past net.peer_timeout, then woken" >&2;  run ps-partition ps PAUSE
fi
if want handshake; then
  echo "== ps, 1,020 stalled handshakes at rank 0" >&2; run ps-flood ps FLOOD
fi

# The large MLP's checkpoint: NODES nodes, ps, a checkpoint every 4 iterations, 12 iterations.
if want checkpoint; then
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
fi

python3 bench/lib/faults_report.py "$out" "$nodes" "$victim" "$config" "$peer_timeout"
