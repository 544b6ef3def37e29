# Sourced by bench scripts (bash): one job on real links, each gradmesh-node process in its own
# network namespace of ../shared/tools/netns-cluster.sh (set NETNS_CLUSTER to use another copy),
# joined by kernel-shaped (tbf) links. Needs root and iproute2; run from the repository root.
#
#   netns_up NODES RATE          namespaces gm_n0.. at RATE (1gbit, 100mbit, 10mbit, 1mbit, none)
#   netns_nodes DIR NODES CONFIG [ARGS...]
#                                 runs NODES nodes of CONFIG (ranks 0.., peers 10.78.0.(r+1):29500)
#                                 with --metrics-out DIR and ARGS, logs in DIR/log-<r>.txt; waits
#                                 for all and prints their exit codes, "0,0,0,0" when all finished
#   netns_down                   removes the namespaces (also on the caller's EXIT: trap it)
# GRADMESH_NODE names another gradmesh-node binary (default ./build/bin/gradmesh-node).
netns_cluster=${NETNS_CLUSTER:-../shared/tools/netns-cluster.sh}
netns_node_binary=${GRADMESH_NODE:-./build/bin/gradmesh-node}

netns_check() {
  [ -x "$netns_cluster" ] || { echo "no $netns_cluster (set NETNS_CLUSTER)" >&2; return 2; }
  [ "$(id -u)" = 0 ] || { echo "network namespaces need root" >&2; return 2; }
}

netns_up() { netns_check && "$netns_cluster" up "$1" "$2" >&2; }

netns_down() { "$netns_cluster" down >/dev/null 2>&1 || true; }

netns_nodes() {
  local dir=$1 nodes=$2 config=$3 peers r codes="" pids=()
  shift 3
  peers=$("$netns_cluster" peers "$nodes" 29500)
  mkdir -p "$dir"
  for ((r = 0; r < nodes; r++)); do
    timeout 1800 "$netns_cluster" run $r "$netns_node_binary" --config "$config" \
      --peers "$peers" --rank $r --metrics-out "$dir" "$@" > "$dir/log-$r.txt" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    if wait "$pid"; then codes+="0,"; else codes+="$?,"; fi
  done
  echo "${codes%,}"
}
