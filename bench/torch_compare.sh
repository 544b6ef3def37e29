#!/usr/bin/env bash
# One node of gradmesh beside PyTorch on this machine: the same model by shapes
# (bench/torch_single_node.py), batch 64, the same threads, runs alternated (gradmesh, PyTorch,
# gradmesh, ...) so that both see the host's modes alike; prints each pair, then the medians of
# samples/s and their ratio, with the machine's state (bench_machine_state) before and after.
#
#   bash bench/torch_compare.sh [MODEL] [PAIRS] [ITERATIONS]     (defaults: resnet 5 150)
#   KERNELS=builtin THREADS=2 bash bench/torch_compare.sh cnn
#
# Needs Debian's python3-torch (scripts/setup.sh does not install it: a benchmark's tool, 1 GB)
# and a build (bash scripts/build.sh). A benchmark, never a test.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-resnet}
pairs=${2:-5}
iterations=${3:-150}
threads=${THREADS:-2}
kernels=${KERNELS:-onednn}
python=/usr/bin/python3
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "torch_compare: $python has no torch; install Debian's python3-torch (apt-get install python3-torch)" >&2
  exit 2
fi
bin=build/bench/bench_single_node
[ -x "$bin" ] || { echo "torch_compare: $bin missing; run bash scripts/build.sh" >&2; exit 2; }

echo "before: $(build/bench/bench_machine_state | tail -1)"
ours=() theirs=()
for ((i = 1; i <= pairs; i++)); do
  a=$("$bin" --model "$model" --kernels "$kernels" --threads "$threads" --iterations "$iterations" |
      sed -n 's/.*batch 64: \([0-9.]*\) samples\/s.*/\1/p')
  b=$("$python" bench/torch_single_node.py --model "$model" --threads "$threads" \
        --iterations "$iterations" | sed -n 's/.*: \([0-9.]*\) samples\/s.*/\1/p')
  echo "pair $i: gradmesh ($kernels) $a samples/s, PyTorch $b samples/s, ratio $(
    awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }')"
  ours+=("$a") theirs+=("$b")
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mo=$(median "${ours[@]}") mt=$(median "${theirs[@]}")
echo "after: $(build/bench/bench_machine_state | tail -1)"
echo "$model, $threads thread(s), batch 64, median of $pairs: gradmesh ($kernels) $mo samples/s," \
  "PyTorch $($python -c 'import torch; print(torch.__version__)') $mt samples/s:" \
  "$(awk -v a="$mo" -v b="$mt" 'BEGIN { printf "%.2fx", a / b }')"
