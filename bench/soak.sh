#!/usr/bin/env bash
# Soak (issue 13's benchmark): NODES local gradmesh-node processes of one long job for SECONDS,
# sampling each node's resident memory (VmRSS) every 10 s and its progress (the iterations of its
# last progress line). Prints, per node, the resident memory after the first minute and at the end
# and the growth between them (target < 5%), and the iterations reached at the half and at the
# end (a node that hangs stops counting). The job is stopped with SIGKILL at the end.
#
#   bash bench/soak.sh [CONFIG] [NODES] [SECONDS]
#   (defaults configs/fashion-mnist-mlp-ako.toml, 8, 600; needs a built tree: scripts/build.sh)
# Env: STRATEGY (default: the config's), OUT (default out/bench-soak).
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/fashion-mnist-mlp-ako.toml}
nodes=${2:-8}
seconds=${3:-600}
out=${OUT:-out/bench-soak}
rm -rf "$out"
mkdir -p "$out"
peers=$(python3 - "$nodes" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(",".join(f"127.0.0.1:{s.getsockname()[1]}" for s in socks))
for s in socks: s.close()
PY
)
extra=()
[[ -n ${STRATEGY:-} ]] && extra=(--set sync.strategy="$STRATEGY")
pids=()
for ((r = 0; r < nodes; r++)); do
  ./build/bin/gradmesh-node --config "$config" --peers "$peers" --rank "$r" \
    --set job.epochs=100000 --set data.test_limit=1000 "${extra[@]}" > "$out/log-$r.txt" 2>&1 &
  pids+=($!)
done
iterations() {  # the iteration count of rank $1's last progress line
  grep -a -o "iter [0-9]*" "$out/log-$1.txt" 2>/dev/null | tail -1 | cut -d' ' -f2 || true
}
start=$(date +%s)
: > "$out/rss.txt"
while (( $(date +%s) - start < seconds )); do
  sleep 10
  now=$(( $(date +%s) - start ))
  line="$now"
  for ((r = 0; r < nodes; r++)); do
    rss=$(awk '/VmRSS/ {print $2}' "/proc/${pids[$r]}/status" 2>/dev/null || echo 0)
    line="$line $rss"
  done
  echo "$line" >> "$out/rss.txt"
  if (( now >= seconds / 2 )) && [[ ! -f $out/half.txt ]]; then
    for ((r = 0; r < nodes; r++)); do echo "$(iterations "$r")"; done > "$out/half.txt"
  fi
done
for ((r = 0; r < nodes; r++)); do echo "$(iterations "$r")"; done > "$out/end.txt"
for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
wait 2>/dev/null || true

python3 - "$out" "$nodes" "$seconds" "$config" <<'PY'
import sys
out, nodes, seconds, config = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = [list(map(int, l.split())) for l in open(f"{out}/rss.txt") if l.strip()]
first = next(r for r in rows if r[0] >= 60)
last = rows[-1]
half = [l.strip() for l in open(f"{out}/half.txt")]
end = [l.strip() for l in open(f"{out}/end.txt")]
print(f"{config}, {nodes} nodes, {seconds} s; resident memory (MB) at {first[0]} s and {last[0]} s")
print(f"{'rank':>4} {'RSS first':>10} {'RSS end':>9} {'growth':>8} {'iter @half':>11} {'iter @end':>10}")
worst = 0.0
for r in range(nodes):
    a, b = first[r + 1] / 1024, last[r + 1] / 1024
    g = (b - a) / a * 100 if a else float("nan")
    worst = max(worst, g)
    print(f"{r:>4} {a:10.1f} {b:9.1f} {g:+7.2f}% {half[r] or '-':>11} {end[r] or '-':>10}")
print(f"largest growth {worst:+.2f}% (target < 5%)")
PY
