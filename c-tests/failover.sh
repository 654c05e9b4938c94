#!/usr/bin/env bash
# c-tests/failover.sh: the Redis master killed with SIGKILL while
# c-tests/net_failover.c pushes (lTvmRequireReplicas 1) and leases.
#
#   failover.sh sentinel|cluster FAILOVERS OUT LIBDIR
#   failover.sh auth|tls 0 OUT LIBDIR
#
# sentinel: a master, two replicas and three sentinels on loopback
#   (down-after-milliseconds 1000, failover-timeout 10000, quorum 2), the
#   program connected with lTvmConnectSentinel.
# cluster: a Redis Cluster of 3 masters with a replica each
#   (cluster-node-timeout 1000), the program connected with lTvmConnect.
# FAILOVERS times: the master (of queue 31's slot) is killed with SIGKILL;
# the failover time is from the kill to the sentinels naming another
# master (the cluster giving the slot to another node); the old master is
# then restarted and becomes a replica, and the next kill waits until it
# is in sync. Then the producers stop, and the program checks that every
# push that returned RC_SUCC was delivered. Here: consumers resumed within
# each failover time plus one second (the program's "gap" lines).
# auth: a master with a password and a sentinel with its own, for
#   net_sentinel_auth.c (lTvmSentinelAuth, lTvmAuth).
# tls: a master, a replica and a sentinel on TLS ports only, for
#   net_sentinel_tls.c (lTvmConnectSentinelTls through a failover).
# Prints one line per failover and the program's summary; exits non-zero
# on any failure. Every process started here is killed at the end; the
# temporary directory OUT/failover.* is removed.
set -u
mode=$1 rounds=$2 out=$3 libdir=$4
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server)}
REDIS_CLI=${REDIS_CLI:-$(command -v redis-cli)}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# free_port, steady_port
. "$ROOT/c-tests/ports.sh"
dir=$(mktemp -d /tmp/tvmq-failover.XXXXXX)
declare -A PID_OF ARGS_OF
PIDS=()
cleanup() {
    kill -KILL "${PIDS[@]}" 2>/dev/null
    wait 2>/dev/null
    rm -rf -- "$dir"
}
trap cleanup EXIT

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
die() { echo "FAILED: $*"; exit 1; }
cli() { "$REDIS_CLI" -p "$@"; }
wait_for() { # SECONDS COMMAND...: until COMMAND succeeds
    local until=$(( $(now_ms) + $1 * 1000 ))
    shift
    until "$@" >/dev/null 2>&1; do
        [ "$(now_ms)" -lt "$until" ] || return 1
        sleep 0.05
    done
}
# start PORT ARGS...: a redis-server (or sentinel) on PORT, remembered to restart it.
start() {
    local port=$1
    shift
    ARGS_OF[$port]="$*"
    # shellcheck disable=SC2068 # the arguments, one word each
    "$REDIS_SERVER" $@ >>"$dir/$port.log" 2>&1 &
    PID_OF[$port]=$!
    PIDS+=($!)
}
pong() { [ "$(cli "$1" ping)" = PONG ]; }

gcc -std=gnu17 -O1 -g -Wall -Wextra -Werror "$ROOT/c-tests/net_failover.c" -I "$ROOT/include" -L "$libdir" -ltvm \
    -lpthread "-Wl,-rpath,$libdir" -o "$out/net_failover" || die "cannot build net_failover"

common=(--bind 127.0.0.1 --save '' --appendonly no --dir "$dir")
if [ "$mode" = auth ]; then
    # A master with a password and a sentinel with another (net_sentinel_auth.c).
    gcc -std=gnu17 -O1 -g -Wall -Wextra -Werror "$ROOT/c-tests/net_sentinel_auth.c" -I "$ROOT/include" -L "$libdir" \
        -ltvm -lpthread "-Wl,-rpath,$libdir" -o "$out/net_sentinel_auth" || die "cannot build net_sentinel_auth"
    M=$(steady_port)
    S=$(steady_port)
    mp="master-$RANDOM$RANDOM" sp="sentinel-$RANDOM$RANDOM"
    start "$M" --port "$M" "${common[@]}" --requirepass "$mp"
    printf 'port %s\nbind 127.0.0.1\ndir %s\nrequirepass %s\nsentinel monitor mymaster 127.0.0.1 %s 1\nsentinel auth-pass mymaster %s\n' \
        "$S" "$dir" "$sp" "$M" "$mp" >"$dir/sentinel-$S.conf"
    start "$S" "$dir/sentinel-$S.conf" --sentinel
    known() { REDISCLI_AUTH=$sp cli "$S" sentinel get-master-addr-by-name mymaster | grep -q "$M"; }
    wait_for 10 known || die "the sentinel did not start"
    "$out/net_sentinel_auth" "127.0.0.1:$S" mymaster "$mp" "$sp" || die "net_sentinel_auth failed"
    echo "ok: lTvmSentinelAuth and lTvmAuth"
    exit 0
fi
if [ "$mode" = tls ]; then
    # A master, a replica and a sentinel that speak TLS only (no plain port),
    # with the certificates of scripts/tls-certs.sh: net_sentinel_tls.c
    # connects with lTvmConnectSentinelTls, the master is killed with
    # SIGKILL, and the same handle reaches the promoted replica over TLS.
    gcc -std=gnu17 -O1 -g -Wall -Wextra -Werror "$ROOT/c-tests/net_sentinel_tls.c" -I "$ROOT/include" -L "$libdir" \
        -ltvm -lpthread "-Wl,-rpath,$libdir" -o "$out/net_sentinel_tls" || die "cannot build net_sentinel_tls"
    bash "$ROOT/scripts/tls-certs.sh" "$dir/tls" >"$dir/tls-certs.log" 2>&1 ||
        die "cannot make the test certificates: $(tail -3 "$dir/tls-certs.log")"
    tls=(tls-cert-file "$dir/tls/server.crt" tls-key-file "$dir/tls/server.key" tls-ca-cert-file "$dir/tls/ca.crt"
        tls-auth-clients no tls-replication yes)
    tcli() { "$REDIS_CLI" --tls --cacert "$dir/tls/ca.crt" -p "$@"; }
    M=$(steady_port)
    R=$(steady_port)
    S=$(steady_port)
    start "$M" --port 0 --tls-port "$M" "${common[@]}" $(printf -- '--%s %s ' "${tls[@]}")
    start "$R" --port 0 --tls-port "$R" "${common[@]}" $(printf -- '--%s %s ' "${tls[@]}") --replicaof 127.0.0.1 "$M"
    { printf 'port 0\ntls-port %s\nbind 127.0.0.1\ndir %s\n' "$S" "$dir"
      printf '%s %s\n' "${tls[@]}"
      printf 'sentinel monitor mymaster 127.0.0.1 %s 1\nsentinel down-after-milliseconds mymaster 1000\n' "$M"
      printf 'sentinel failover-timeout mymaster 10000\n'; } >"$dir/sentinel-$S.conf"
    start "$S" "$dir/sentinel-$S.conf" --sentinel
    online() { tcli "$M" info replication | grep -q '^slave0:.*state=online'; }
    seen() { [ "$(tcli "$S" sentinel replicas mymaster | grep -c '^name$')" -ge 1 ]; }
    wait_for 20 online || die "the replica did not sync over TLS: $(tail -3 "$dir/$R.log")"
    wait_for 20 seen || die "the sentinel did not find the replica: $(tail -3 "$dir/$S.log")"
    "$out/net_sentinel_tls" "127.0.0.1:$S" mymaster "$dir/tls" "$dir/killed" >"$dir/run.log" 2>&1 &
    prog=$!
    PIDS+=("$prog")
    wait_for 20 grep -q '^ready' "$dir/run.log" || die "net_sentinel_tls: $(tail -5 "$dir/run.log")"
    kill -KILL "${PID_OF[$M]}"
    wait "${PID_OF[$M]}" 2>/dev/null
    t0=$(now_ms)
    promoted() { tcli "$S" sentinel get-master-addr-by-name mymaster | tail -1 | grep -qx "$R"; }
    wait_for 30 promoted || die "the sentinel did not promote the replica: $(tail -5 "$dir/$S.log")"
    echo "tls: master :$M killed, replica :$R promoted after $(( $(now_ms) - t0 )) ms"
    touch "$dir/killed"
    wait "$prog" || die "net_sentinel_tls failed: $(tail -5 "$dir/run.log")"
    # Record 79, pushed after the failover, is on the promoted replica.
    [ "$(tcli "$R" llen 31)" = 1 ] || die "queue 31 on :$R holds $(tcli "$R" llen 31) records, not 1"
    echo "ok: lTvmConnectSentinelTls, and the same handle on the promoted replica over TLS"
    exit 0
fi
if [ "$mode" = sentinel ]; then
    M=$(steady_port)
    start "$M" --port "$M" "${common[@]}"
    wait_for 5 pong "$M" || die "master did not start"
    REPL=()
    for _ in 1 2; do
        r=$(steady_port)
        REPL+=("$r")
        start "$r" --port "$r" "${common[@]}" --replicaof 127.0.0.1 "$M"
    done
    SENT=()
    for _ in 1 2 3; do
        s=$(steady_port)
        SENT+=("$s")
        printf 'port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster 127.0.0.1 %s 2\nsentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 10000\nsentinel parallel-syncs mymaster 2\n' \
            "$s" "$dir" "$M" >"$dir/sentinel-$s.conf"
        start "$s" "$dir/sentinel-$s.conf" --sentinel
    done
    # two replicas online, each with its link to the master up
    in_sync() {
        [ "$(cli "$1" info replication | grep -c '^slave[0-9]*:.*state=online')" = 2 ] || return 1
        local r
        for r in "${REPL[@]}" "${OLD_MASTERS[@]}"; do
            [ "$r" = "$1" ] && continue
            cli "$r" info replication | grep -q '^master_link_status:up' || return 1
        done
    }
    OLD_MASTERS=("$M")
    quorum() { cli "${SENT[0]}" sentinel ckquorum mymaster | grep -q '^OK' &&
        [ "$(cli "${SENT[0]}" sentinel replicas mymaster | grep -c '^name$')" -ge 2 ] &&
        [ "$(cli "${SENT[0]}" sentinel sentinels mymaster | grep -c '^name$')" -ge 2 ]; }
    wait_for 10 in_sync "$M" || die "the replicas did not sync"
    wait_for 20 quorum || die "the sentinels did not find each other and the replicas"
    master() { cli "${SENT[0]}" sentinel get-master-addr-by-name mymaster | tail -1; }
    list=$(printf '127.0.0.1:%s,' "${SENT[@]}")
    "$out/net_failover" sentinel "${list%,}" mymaster "$dir/stop" >"$dir/run.log" 2>&1 &
else
    NODES=()
    for _ in 1 2 3 4 5 6; do
        p=$(steady_port)
        NODES+=("$p")
        mkdir -p "$dir/$p"
        start "$p" --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir/$p" --cluster-enabled yes \
            --cluster-config-file "$dir/$p/nodes.conf" --cluster-node-timeout 1000 --cluster-replica-validity-factor 0
    done
    for p in "${NODES[@]}"; do wait_for 5 pong "$p" || die "node $p did not start"; done
    "$REDIS_CLI" --cluster create $(printf '127.0.0.1:%s ' "${NODES[@]}") --cluster-replicas 1 --cluster-yes \
        >"$dir/create.log" 2>&1 || die "cluster create failed: $(tail -3 "$dir/create.log")"
    healthy() {
        local p
        for p in "${NODES[@]}"; do cli "$p" cluster info | grep -q '^cluster_state:ok' || return 1; done
        # every master has a replica in sync
        [ "$(cli "${NODES[0]}" cluster nodes | grep -c ' slave ')" -ge 3 ] || return 1
        for p in "${NODES[@]}"; do
            if cli "$p" role | head -1 | grep -q master; then
                cli "$p" info replication | grep -q '^slave0:.*state=online' || return 1
            else
                cli "$p" info replication | grep -q '^master_link_status:up' || return 1
            fi
        done
    }
    wait_for 30 healthy || die "the cluster did not become healthy"
    slot=$(cli "${NODES[0]}" cluster keyslot 31)
    # master(): the port of the node serving queue 31's slot.
    master() {
        cli "${NODES[0]}" cluster slots 2>/dev/null | python3 -c '
import sys
slot = int(sys.argv[1])
lines = [l.strip() for l in sys.stdin]
i = 0
while i + 4 < len(lines):
    try:
        a, b = int(lines[i]), int(lines[i + 1])
    except ValueError:
        i += 1
        continue
    if a <= slot <= b:
        print(lines[i + 3])
        break
    i += 2
' "$slot"
    }
    in_sync() { healthy; }
    "$out/net_failover" cluster 127.0.0.1 "${NODES[0]}" "$dir/stop" >"$dir/run.log" 2>&1 &
fi
runner=$!
PIDS+=($runner)
sleep 1.5

fails=()
for round in $(seq "$rounds"); do
    old=$(master)
    [ -n "$old" ] && [ -n "${PID_OF[$old]:-}" ] || die "round $round: no master found ($old)"
    t_kill=$(now_ms)
    kill -KILL "${PID_OF[$old]}"
    wait "${PID_OF[$old]}" 2>/dev/null
    if [ "$mode" = sentinel ]; then
        # the sentinels name another master, and it says it is one
    moved() { local m; m=$(master); [ -n "$m" ] && [ "$m" != "$old" ] && cli "$m" role | head -1 | grep -q '^master'; }
    else
        # another node than the killed one serves the slot, as seen from a live node
        moved() {
            local p m
            for p in "${NODES[@]}"; do [ "$p" != "$old" ] && break; done
            m=$(cli "$p" cluster slots 2>/dev/null | python3 -c '
import sys
slot = int(sys.argv[1]); lines = [l.strip() for l in sys.stdin]; i = 0
while i + 4 < len(lines):
    try:
        a, b = int(lines[i]), int(lines[i + 1])
    except ValueError:
        i += 1; continue
    if a <= slot <= b:
        print(lines[i + 3]); break
    i += 2' "$slot")
            [ -n "$m" ] && [ "$m" != "$old" ]
        }
    fi
    wait_for 30 moved || die "round $round: no failover within 30 s (master :$old): $(for p in "${NODES[@]:-${SENT[0]}}"; do cli "$p" cluster nodes 2>/dev/null; break; done)"
    t_done=$(now_ms)
    new=$(master)
    echo "failover $round: killed :$old at $t_kill, :$new master after $((t_done - t_kill)) ms"
    fails+=("$t_kill $t_done")
    # The old master comes back as a replica (sentinel: of the new master).
    if [ "$mode" = sentinel ]; then
        # shellcheck disable=SC2086 # the saved arguments
        start "$old" --port "$old" "${common[@]}" --replicaof 127.0.0.1 "$new"
        settled() { in_sync "$(master)"; }
        wait_for 30 settled || die "round $round: the replicas of :$new did not sync: $(for r in "${REPL[@]}" "${OLD_MASTERS[@]}"; do echo ":$r"; cli "$r" info replication | grep -E '^(role|master_port|master_link_status|slave[0-9])'; done)"
        wait_for 30 quorum || die "round $round: the sentinels did not settle"
    else
        # shellcheck disable=SC2086 # the saved arguments
        start "$old" ${ARGS_OF[$old]}
        wait_for 30 in_sync || die "round $round: the cluster did not heal"
    fi
    sleep 1
done
sleep 1
touch "$dir/stop"
wait "$runner"
rc=$?
grep -v "^lease: \|^push: \|^ack: " "$dir/run.log" | head -40
[ $rc = 0 ] || die "net_failover exited with status $rc: $(tail -5 "$dir/run.log")"
# Consumers resumed within each failover time plus one second: the gap
# without deliveries around each kill ended by then.
worst=0
for f in "${fails[@]}"; do
    read -r t_kill t_done <<<"$f"
    # the first stretch without deliveries that ends after the kill and
    # began by a second after it (a delivery in flight may land just after)
    end=$(awk -v k="$t_kill" '$1 == "gap" && $3 >= k && $2 <= k + 1000 { print $3 }' "$dir/run.log" | head -1)
    [ -n "$end" ] || end=$t_kill
    late=$((end - t_done))
    echo "  consumers resumed $((end - t_kill)) ms after the kill, $late ms after the failover"
    [ $late -le 1000 ] || die "consumers resumed $late ms after the failover (more than 1000)"
    [ $late -gt $worst ] && worst=$late
done
echo "ok: $rounds failovers, consumers resumed at most ${worst} ms after each failover"
