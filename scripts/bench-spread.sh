#!/usr/bin/env bash
# scripts/bench-spread.sh: what a spread queue (lTvmSpread) costs against
# one key, on a 3-master Redis Cluster started here on loopback (no
# replicas), with bench/drivers/net_driver.c (make net-driver):
#
#   bash scripts/bench-spread.sh NET_DRIVER [ROUNDS] [RECORDS]
#
# Each round, alternately: push then pop RECORDS records through queue 21
# as one key and as 6 shards, by 1 and by 4 threads. Prints each run's rate
# and, per master, the CPU time it spent (INFO cpu: used_cpu_sys +
# used_cpu_user) over the spread runs and over the one-key runs: where the
# work went. Every server started here is killed at the end.
set -u
driver=$1 rounds=${2:-3} records=${3:-40000}
dir=$(mktemp -d /tmp/tvmq-bench-spread.XXXXXX)
PIDS=()
trap 'kill -KILL "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
# steady_port: a node's port P with P + 10000 (its bus port) free
. "$(dirname "${BASH_SOURCE[0]}")/../c-tests/ports.sh"
NODES=()
for _ in 1 2 3; do
    p=$(steady_port)
    NODES+=("$p")
    mkdir -p "$dir/$p"
    redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir/$p" --cluster-enabled yes \
        --cluster-config-file "$dir/$p/nodes.conf" >"$dir/$p.log" 2>&1 &
    PIDS+=($!)
done
for p in "${NODES[@]}"; do until [ "$(redis-cli -p "$p" ping 2>/dev/null)" = PONG ]; do sleep 0.05; done; done
redis-cli --cluster create $(printf '127.0.0.1:%s ' "${NODES[@]}") --cluster-yes >/dev/null 2>&1 || { echo "cluster create failed"; exit 1; }
ok() { local p; for p in "${NODES[@]}"; do redis-cli -p "$p" cluster info | grep -q cluster_state:ok || return 1; done; }
until ok; do sleep 0.1; done
cpu() { redis-cli -p "$1" info cpu | awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.3f", s }'; }
declare -A CPU
for p in "${NODES[@]}"; do CPU[one,$p]=0; CPU[spread,$p]=0; done
run() { # KIND THREADS OP EXTRA...
    local kind=$1 threads=$2 op=$3 p before=() i=0 line
    shift 3
    for p in "${NODES[@]}"; do before+=("$(cpu "$p")"); done
    line=$("$driver" --host 127.0.0.1 --port "${NODES[0]}" --op "$op" --threads "$threads" --records "$records" --queue 21 "$@")
    for p in "${NODES[@]}"; do
        CPU[$kind,$p]=$(awk -v a="${CPU[$kind,$p]}" -v b="$(cpu "$p")" -v c="${before[$i]}" 'BEGIN { printf "%.3f", a + b - c }')
        i=$((i + 1))
        redis-cli -p "$p" flushall >/dev/null
    done
    echo "$kind threads=$threads $(echo "$line" | grep -o 'op=[a-z]* .*rate=[0-9]*' | sed 's/shared=. //; s/records=[0-9]* //')"
}
for r in $(seq "$rounds"); do
    for threads in 1 4; do
        run one "$threads" push
        run one "$threads" pop --nowait
        run spread "$threads" push --spread 6
        run spread "$threads" pop --nowait --spread 6
    done
done
for p in "${NODES[@]}"; do
    echo "master :$p CPU seconds: one key ${CPU[one,$p]}, spread ${CPU[spread,$p]}"
done
