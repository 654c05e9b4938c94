#!/usr/bin/env bash
# c-tests/run.sh: the C test suite of tvmq (`make test-c`).
#
#   LIBDIR=<abs target/release> SEED=<dir of the seed .c files>
#   SEEDBIN=<abs dir of the compiled push_bench/pop_bench> TVMQ=<abs tvmq>
#   bash c-tests/run.sh
#
# 1. header: tvm.h / tmain.h compile cleanly as gnu17, c99 and C++17, with
#    the seeds' own uint64/get_tick_time declarations, statically linked too;
#    the seeds compile with -Wall -Werror.
# 2. seeds: push_bench / pop_bench, unchanged, at 1 2 4 10 threads, then
#    pushing and popping at the same time.
# 3. api: every queue function and error code (test_api.c), threads and
#    processes (test_mt.c), no futex wake when nobody sleeps (test_wake.c),
#    acknowledged consumption: every lease call and code (test_lease.c),
#    NULL and garbage arguments to every function and queue files corrupted
#    while attached (test_hostile.c), STVM's other queue calls and
#    lCreateQueueEx for every kind of queue (test_stvm.c), an export and
#    import of 1 M records while a producer and a consumer run (test_export.c),
#    lQueueStats, lListQueues and sGetTErrDetail (test_watch.c).
# 4. network: the lTvm* calls (test_net.c), the seeds' network twins
#    (net_push.c, net_pop.c) and a Redis Cluster (net_cluster.sh), against a
#    redis-server started here ($REDIS_SERVER, $REDIS_CLI: found on PATH)
#    and against `$TVMQ serve`; TLS (test_tls.c) against `$TVMQ serve
#    --tls-port` and `redis-server --tls-port` (skipped, saying why, when
#    that redis-server has no TLS), certificates made by
#    scripts/tls-certs.sh.
# 5. security: file permissions with a second user (security.sh; needs
#    root, else one SKIP line, counted in the summary).
#
# Every test gets its own fresh $TVMDBD under /dev/shm, removed afterwards.
# Prints one PASS/FAIL line per test and a summary; exits 1 on any failure.
# Binaries go to target/c-tests/.

set -u
: "${LIBDIR:?set LIBDIR}" "${SEED:?set SEED}" "${SEEDBIN:?set SEEDBIN}" "${TVMQ:?set TVMQ}"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=$ROOT/c-tests
INC=$ROOT/include
OUT=$ROOT/target/c-tests
SEED=$(cd "$SEED" && pwd)
export TVMQ
LINK=(-L "$LIBDIR" -ltvm -lpthread "-Wl,-rpath,$LIBDIR")
TIMEOUT=${CTEST_TIMEOUT:-60}   # seconds for any one program: a hang is a failure, not a stall

mkdir -p "$OUT"
LOGDIR=$(mktemp -d /tmp/tvmq-ctests-log.XXXXXX)
PIDFILE=$LOGDIR/pids   # every program started, one pid a line (tests run in subshells)
TMPDIRS=()

# Kills what a failed or interrupted test may have left running (only the
# programs started here, each the leader of its own process group: the group
# takes their children too), removes every temp dir.
cleanup() {
    local pid
    if [ -f "$PIDFILE" ]; then
        while read -r pid; do
            kill -KILL -- "-$pid" 2>/dev/null
            kill -KILL "$pid" 2>/dev/null
        done <"$PIDFILE"
    fi
    for d in "${TMPDIRS[@]}"; do rm -rf -- "$d"; done
    rm -rf -- "$LOGDIR"
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
SUITE_START=$(now_ms)
PASSED=0
FAILED=0
SKIPPED=0
FAILED_NAMES=()

# Runs a command under `timeout` in its own process group (timeout makes
# itself the group leader), waits for it, then kills anything of that group
# still alive (e.g. a forked child of a crashed test). Returns its status.
run_bounded() {
    local pid rc
    timeout -k 5 "$TIMEOUT" "$@" &
    pid=$!
    echo "$pid" >>"$PIDFILE"
    wait "$pid"
    rc=$?
    kill -KILL -- "-$pid" 2>/dev/null
    return $rc
}

# run_test NAME FUNCTION [ARGS...]: runs FUNCTION (a shell function that
# returns non-zero and/or prints why on failure) with TVMDBD set to a fresh
# directory; prints the PASS/FAIL line and the log of a failure.
run_test() {
    local name=$1 fn=$2 dir log rc t0 t1
    shift 2
    log=$LOGDIR/$name.log
    # A fresh queue directory for this test alone.
    dir=$(mktemp -d /dev/shm/tvmq-ctest.XXXXXX) || { echo "FAIL  $name  (cannot create a temp dir)"; FAILED=$((FAILED + 1)); return; }
    TMPDIRS+=("$dir")
    t0=$(now_ms)
    ( export TVMDBD=$dir; cd "$ROOT" && "$fn" "$@" ) >"$log" 2>&1
    rc=$?
    t1=$(now_ms)
    rm -rf -- "$dir"
    if [ $rc -eq 0 ]; then
        printf 'PASS  %-50s %6d ms\n' "$name" $((t1 - t0))
        PASSED=$((PASSED + 1))
    else
        printf 'FAIL  %-50s %6d ms\n' "$name" $((t1 - t0))
        sed -e 's/^/      | /' "$log" | head -n 40
        FAILED=$((FAILED + 1))
        FAILED_NAMES+=("$name")
    fi
}

fail() { echo "$*"; return 1; }

# `tvmq stat` value of queue $1, line $2 ("depth", "pushed"...).
stat_of() { "$TVMQ" stat "$1" | awk -v k="$2" '$1 == k { print $2; exit }'; }

# ---------------------------------------------------------------------------
# 1. Header
# ---------------------------------------------------------------------------

# compile_and_run OUTNAME COMPILER FLAGS... -- SOURCE: compiles SOURCE against
# tvm.h and libtvm (any warning is an error: -Werror is in FLAGS, and any
# output at all is reported), then runs it.
compile_and_run() {
    local out=$OUT/$1 cc=$2 src
    shift 2
    local flags=()
    while [ "$1" != "--" ]; do flags+=("$1"); shift; done
    src=$2
    local msgs
    msgs=$("$cc" "${flags[@]}" "$src" -I "$INC" "${LINK[@]}" -o "$out" 2>&1) || fail "compile failed: $cc ${flags[*]} $src"$'\n'"$msgs" || return 1
    [ -z "$msgs" ] || fail "compiler output (warnings?): $msgs" || return 1
    run_bounded "$out" || fail "$out exited with status $?"
}

t_header_gnu17()   { compile_and_run hdr_api_gnu17 gcc -std=gnu17 -Wall -Wextra -Werror -- c-tests/header/hdr_api.c; }
# c99 needs no feature-test macro: tvm.h's types (pthread_t, time_t, size_t,
# bool) are all available in strict C99 mode, so none is given.
t_header_c99()     { compile_and_run hdr_api_c99 gcc -std=c99 -Wall -Werror -- c-tests/header/hdr_api.c; }
t_header_cxx17()   { compile_and_run hdr_api_cxx17 g++ -std=c++17 -Wall -Werror -x c++ -- c-tests/header/hdr_api.c; }
t_header_tmain()   {
    compile_and_run hdr_tmain_gnu17 gcc -std=gnu17 -Wall -Wextra -Werror -- c-tests/header/hdr_tmain.c &&
    compile_and_run hdr_tmain_c99 gcc -std=c99 -Wall -Werror -- c-tests/header/hdr_tmain.c
}
t_header_seed_style() {
    compile_and_run hdr_seedstyle_gnu17 gcc -std=gnu17 -Wall -Wextra -Werror -- c-tests/header/hdr_seedstyle.c &&
    compile_and_run hdr_seedstyle_c99 gcc -std=c99 -Wall -Wextra -Werror -- c-tests/header/hdr_seedstyle.c &&
    compile_and_run hdr_seedstyle_cxx17 g++ -std=c++17 -Wall -Werror -x c++ -- c-tests/header/hdr_seedstyle.c
}

# STVM's own declarations of its other queue calls, and its constants,
# agree with tvm.h's (no conflicting types, no warning).
t_header_stvm_decl() {
    compile_and_run hdr_stvm_decl_gnu17 gcc -std=gnu17 -Wall -Wextra -Werror -- c-tests/header/hdr_stvm_decl.c &&
    compile_and_run hdr_stvm_decl_c99 gcc -std=c99 -Wall -Wextra -Werror -- c-tests/header/hdr_stvm_decl.c &&
    compile_and_run hdr_stvm_decl_cxx17 g++ -std=c++17 -Wall -Werror -x c++ -- c-tests/header/hdr_stvm_decl.c
}

# The program links against libtvm.a alone (no libtvm.so at run time).
t_static_link() {
    local out=$OUT/hdr_api_static msgs
    msgs=$(gcc -std=gnu17 -Wall -Werror c-tests/header/hdr_api.c -I "$INC" "$LIBDIR/libtvm.a" -lpthread -o "$out" 2>&1) ||
        fail "static link failed: $msgs" || return 1
    if ldd "$out" | grep -q libtvm; then fail "$out still needs libtvm.so"; return 1; fi
    run_bounded "$out" || fail "$out exited with status $?"
}

# The seeds, unchanged, compile without a single warning; the committed
# copies are byte-identical to the originals.
t_seeds_compile() {
    local s o msgs
    for s in push_bench pop_bench; do
        cmp "$SEED/$s.c" "$ROOT/c-tests/seed/$s.c" || fail "c-tests/seed/$s.c differs from $SEED/$s.c" || return 1
        for o in -O0 -O2; do
            msgs=$(gcc $o -Wall -Werror -c "$SEED/$s.c" -I "$INC" -o "$OUT/$s$o.o" 2>&1) ||
                fail "gcc $o -Wall -Werror $s.c failed:"$'\n'"$msgs" || return 1
            [ -z "$msgs" ] || fail "gcc $o -Wall $s.c printed: $msgs" || return 1
        done
        msgs=$(gcc -O2 -Wall -Werror "$SEED/$s.c" -I "$INC" "${LINK[@]}" -o "$OUT/$s" 2>&1) ||
            fail "linking $s failed: $msgs" || return 1
    done
}

# ---------------------------------------------------------------------------
# 2. Seed programs (from $SEEDBIN, built by the Makefile)
# ---------------------------------------------------------------------------
SEED_ROWS=400000

# run_seed PROGRAM THREADS ROWS TAG: runs a seed program; checks exit 0, an
# empty stderr and a cost_time line on stdout.
run_seed() {
    local prog=$1 n=$2 rows=$3 tag=$4 rc
    run_bounded "$SEEDBIN/$prog" "$n" "$rows" >"$LOGDIR/$tag.out" 2>"$LOGDIR/$tag.err"
    rc=$?
    [ $rc -eq 0 ] || fail "$prog $n $rows exited with status $rc; stderr: $(head -c 500 "$LOGDIR/$tag.err")" || return 1
    [ ! -s "$LOGDIR/$tag.err" ] || fail "$prog $n $rows wrote to stderr: $(head -c 500 "$LOGDIR/$tag.err")" || return 1
    grep -Eq '^cost_time:\[[0-9]+\]' "$LOGDIR/$tag.out" || fail "$prog $n $rows: no cost_time line: $(head -c 200 "$LOGDIR/$tag.out")"
}

# Push then pop with N threads: depth rows/N*N after the push, 0 after the pop.
t_seed_push_then_pop() {
    local n=$1 rows=$SEED_ROWS total d
    total=$(( rows / n * n ))
    "$TVMQ" create 21 --rows "$rows" --size 304 >/dev/null || fail "tvmq create failed" || return 1
    run_seed push_bench "$n" "$rows" "push$n" || return 1
    d=$(stat_of 21 depth)
    [ "$d" = "$total" ] || fail "after push_bench $n $rows: depth $d, expected $total" || return 1
    [ "$(stat_of 21 pushed)" = "$total" ] || fail "pushed counter $(stat_of 21 pushed), expected $total" || return 1
    run_seed pop_bench "$n" "$rows" "pop$n" || return 1
    d=$(stat_of 21 depth)
    [ "$d" = 0 ] || fail "after pop_bench $n $rows: depth $d, expected 0" || return 1
    [ "$(stat_of 21 popped)" = "$total" ] || fail "popped counter $(stat_of 21 popped), expected $total"
}

# Pushers and poppers at the same time, on a queue with room for everything
# (far from full): SPEC is a list of "prog:threads:rows" run concurrently;
# all exit 0 with no error output and the queue ends empty. Repeated
# `rounds` times on the same queue.
t_seed_concurrent() {
    local rounds=$1 total=$2
    shift 2
    local r spec prog n rows pids i rc ok=0 d
    "$TVMQ" create 21 --rows "$SEED_ROWS" --size 304 >/dev/null || fail "tvmq create failed" || return 1
    for ((r = 1; r <= rounds; r++)); do
        pids=()
        i=0
        for spec in "$@"; do
            IFS=: read -r prog n rows <<<"$spec"
            i=$((i + 1))
            ( run_seed "$prog" "$n" "$rows" "conc$r.$i" ) &
            pids+=($!)
        done
        for pid in "${pids[@]}"; do
            wait "$pid" || ok=1
        done
        [ $ok -eq 0 ] || fail "round $r: a seed program failed" || return 1
        d=$(stat_of 21 depth)
        [ "$d" = 0 ] || fail "round $r: depth $d after all programs, expected 0" || return 1
    done
    [ "$(stat_of 21 pushed)" = $((total * rounds)) ] || fail "pushed $(stat_of 21 pushed), expected $((total * rounds))" || return 1
    [ "$(stat_of 21 popped)" = $((total * rounds)) ] || fail "popped $(stat_of 21 popped), expected $((total * rounds))"
}

# ---------------------------------------------------------------------------
# 3. API tests: each test of test_api / test_mt / test_wake is one PASS/FAIL line
# ---------------------------------------------------------------------------

build_prog() {
    gcc -std=gnu17 -O1 -g -Wall -Wextra -Werror "$SRC/$1.c" -I "$INC" "${LINK[@]}" -o "$OUT/$1"
}

t_api() { run_bounded "$OUT/$1" "$2"; }

# ---------------------------------------------------------------------------

echo "== header"
run_test header_gnu17_wall_wextra_werror t_header_gnu17
run_test header_c99_wall_werror t_header_c99
run_test header_cxx17_wall_werror t_header_cxx17
run_test header_tmain t_header_tmain
run_test header_seed_style_uint64_decl t_header_seed_style
run_test header_stvm_declarations t_header_stvm_decl
run_test header_static_link t_static_link
run_test seeds_compile_wall_werror t_seeds_compile

echo "== seed programs ($SEEDBIN)"
for n in 1 2 4 10; do
    run_test "seed_push_then_pop_${n}_threads" t_seed_push_then_pop "$n"
done
run_test seed_push_then_pop_3_threads_uneven t_seed_push_then_pop 3
run_test seed_concurrent_1_push_1_pop t_seed_concurrent 3 200000 pop_bench:1:200000 push_bench:1:200000
run_test seed_concurrent_2_push_2_pop t_seed_concurrent 5 400000 pop_bench:2:400000 push_bench:2:400000
run_test seed_concurrent_2x2_processes t_seed_concurrent 3 200000 \
    pop_bench:1:100000 push_bench:1:100000 pop_bench:1:100000 push_bench:1:100000

for prog in test_api test_mt test_wake test_hostile test_lease test_stvm test_export test_watch; do
    echo "== $prog"
    if ! build_prog "$prog" >"$LOGDIR/build-$prog.log" 2>&1; then
        echo "FAIL  build_$prog"
        sed -e 's/^/      | /' "$LOGDIR/build-$prog.log" | head -n 40
        FAILED=$((FAILED + 1))
        FAILED_NAMES+=("build_$prog")
        continue
    fi
    for t in $("$OUT/$prog" --list); do
        run_test "$prog.$t" t_api "$prog" "$t"
    done
done

# ---------------------------------------------------------------------------
# 4. Network: the lTvm* calls against a redis-server started here (and
#    stopped, whatever happens: its pid is in $PIDFILE) and against tvmq
#    serve: the seeds' network twins (net_push.c, net_pop.c: every record
#    exactly once, per-producer order) and every call and error code
#    (test_net.c, with fake servers of its own), and lTvmCount,
#    lTvmTruncate, lTvmDropTable, lTvmResetLock on both (net_admin.c), and
#    the lease calls (net_lease.c: one sequence on a local queue, on tvmq
#    serve, on the redis-server and on a 3-master cluster; net_lease_kill.c:
#    leasing consumers killed with SIGKILL on both Redis kinds).
# ---------------------------------------------------------------------------
NET_ROWS=${NET_ROWS:-20000}          # records of a synchronous twin run
NET_ASYNC_ROWS=${NET_ASYNC_ROWS:-100000}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server)}
REDIS_CLI=${REDIS_CLI:-$(command -v redis-cli)}
export REDIS_SERVER REDIS_CLI

# free_port, steady_port
. "$ROOT/c-tests/ports.sh"

# wait_ping PORT: until the server on PORT answers PING (5 s at most).
wait_ping() {
    local i
    for i in $(seq 100); do
        [ "$("$REDIS_CLI" -p "$1" ping 2>/dev/null)" = PONG ] && return 0
        sleep 0.05
    done
    return 1
}

# net_len PORT: length of queue 21 (LLEN answers on both servers).
net_len() { "$REDIS_CLI" -p "$1" llen 21; }

# t_net_twin PORT HOST PUSHMODE POPMODE THREADS ROWS: net_push then net_pop
# with THREADS threads; the queue holds ROWS records between them, none after.
t_net_twin() {
    local port=$1 host=$2 pm=$3 cm=$4 n=$5 rows=$6 len
    len=$(net_len "$port")
    [ "$len" = 0 ] || fail "queue 21 holds $len records before the test" || return 1
    run_bounded "$OUT/net_push" "$host" "$port" "$n" "$rows" "$pm" || fail "net_push $n $rows $pm failed (status $?)" || return 1
    len=$(net_len "$port")
    [ "$len" = "$rows" ] || fail "after net_push $n $rows $pm: $len records, want $rows" || return 1
    run_bounded "$OUT/net_pop" "$host" "$port" "$n" "$rows" "$n" "$cm" || fail "net_pop $n $rows $cm failed (status $?)" || return 1
    len=$(net_len "$port")
    [ "$len" = 0 ] || fail "after net_pop $n $rows $cm: $len records left"
}

# run_net_twins LABEL PORT SOCKET: the twins against the server on PORT.
run_net_twins() {
    local label=$1 port=$2 sock=$3 n
    for n in 1 2 4 10; do
        run_test "net_${label}_push_pop_${n}_threads" t_net_twin "$port" 127.0.0.1 sync normal "$n" "$NET_ROWS"
        run_test "net_${label}_async_push_popup_${n}_threads" t_net_twin "$port" 127.0.0.1 async popup "$n" "$NET_ASYNC_ROWS"
    done
    run_test "net_${label}_shared_connection_10_threads" t_net_twin "$port" 127.0.0.1 shared shared 10 "$NET_ROWS"
    run_test "net_${label}_unix_socket_nowait_2_threads" t_net_twin "$port" "$sock" sync nowait 2 "$NET_ROWS"
}

# t_net_admin PORT redis|tvmq: lTvmCount, lTvmTruncate, lTvmDropTable,
# lTvmResetLock against the server on PORT (net_admin.c).
t_net_admin() { run_bounded "$OUT/net_admin" 127.0.0.1 "$1" "$2"; }

# t_net_lease local | PORT redis | PORT tvmq DIR: the lease sequence of
# net_lease.c on a local queue (in a fresh $TVMDBD), against a redis-server
# (NOT_SUPPT_OPT), or against tvmq serve serving DIR.
t_net_lease() {
    case $1 in
    local) TVMDBD=$(mktemp -d "$NETDIR/lease-local.XXXXXX") run_bounded "$OUT/net_lease" local ;;
    *) run_bounded "$OUT/net_lease" 127.0.0.1 "$@" ;;
    esac
}

# t_net_lease_kill PORT [-c]: leasing consumers killed with SIGKILL under
# load (net_lease_kill.c: no record acknowledged twice, no error), then, in
# Redis (-c: through a cluster), the lease stats count exactly one
# acknowledgement per record and nothing is left in any of queue 27's keys.
t_net_lease_kill() {
    local port=$1 c=${2:-} records=5000 k v
    run_bounded "$OUT/net_lease_kill" 127.0.0.1 "$port" 27 "$records" 4 8 300 || fail "net_lease_kill failed (status $?)" || return 1
    # shellcheck disable=SC2086 # -c or nothing
    v=$("$REDIS_CLI" $c -p "$port" hget '{27}:stats' acked)
    [ "$v" = "$records" ] || fail "{27}:stats counts $v acknowledgements, want $records" || return 1
    "$REDIS_CLI" $c -p "$port" hgetall '{27}:stats' | paste -sd ' '
    for k in 27 '{27}:stage' '{27}:retry'; do
        v=$("$REDIS_CLI" $c -p "$port" llen "$k")
        [ "$v" = 0 ] || fail "$k holds $v records after the run" || return 1
    done
    for k in '{27}:leased' '{27}:delayed'; do
        v=$("$REDIS_CLI" $c -p "$port" zcard "$k")
        [ "$v" = 0 ] || fail "$k holds $v entries after the run" || return 1
    done
    v=$("$REDIS_CLI" $c -p "$port" hlen '{27}:rec')
    [ "$v" = 0 ] || fail "{27}:rec holds $v records after the run" || return 1
    "$REDIS_CLI" $c -p "$port" del 27 '{27}:opts' '{27}:stats' '{27}:seq' >/dev/null
}

# t_net_spread PORTS...: queue 41 spread over 6 shards of the cluster
# (net_spread.c): 3,000 records pushed, then every master holds shard keys
# (41.<i>.<n>) with records; popped each once; 60 records in one shard
# popped in order with at most 2 LPOPs each; then leased and acknowledged.
t_net_spread() {
    local p n
    run_bounded "$OUT/net_spread" 127.0.0.1 "$1" push 3000 || fail "net_spread push failed" || return 1
    for p in "$@"; do
        n=$("$REDIS_CLI" -p "$p" --scan --pattern '41.*' | wc -l)
        echo "master :$p holds $n shards of queue 41: $("$REDIS_CLI" -p "$p" --scan --pattern '41.*' | while read -r k; do printf '%s=%s ' "$k" "$("$REDIS_CLI" -p "$p" llen "$k")"; done)"
        [ "$n" -gt 0 ] || fail "master :$p holds no shard of queue 41" || return 1
    done
    run_bounded "$OUT/net_spread" 127.0.0.1 "$1" pop 3000 || fail "net_spread pop failed" || return 1
    # 60 pops of records all in one shard (and one of the empty queue) look
    # at the next shard, then at every shard in one round of LLEN, then pop
    # the full one: at most 2 LPOPs a pop, not one per shard looked at.
    for p in "$@"; do "$REDIS_CLI" -p "$p" config resetstat >/dev/null; done
    run_bounded "$OUT/net_spread" 127.0.0.1 "$1" sparse 60 || fail "net_spread sparse failed" || return 1
    n=0
    for p in "$@"; do
        n=$((n + $("$REDIS_CLI" -p "$p" info commandstats | sed -n 's/^cmdstat_lpop:calls=\([0-9]*\).*/\1/p' | grep . || echo 0)))
    done
    echo "61 pops of a spread queue whose records are in one shard: $n LPOPs"
    [ "$n" -le 122 ] || fail "$n LPOPs for 61 pops of a sparse spread queue (at most 122)" || return 1
    run_bounded "$OUT/net_spread" 127.0.0.1 "$1" lease 1000 || fail "net_spread lease failed"
}

# slot_nodes PORT SLOT: "owner_id owner_port other_id other_port" of SLOT (the
# other: the next master after the owner), from node PORT's CLUSTER NODES.
slot_nodes() {
    "$REDIS_CLI" -p "$1" cluster nodes | python3 -c '
import sys
slot = int(sys.argv[1])
masters = []
for line in sys.stdin:
    f = line.split()
    if len(f) < 8 or "master" not in f[2]:
        continue
    port = f[1].split("@")[0].rsplit(":", 1)[1]
    owns = False
    for r in f[8:]:
        if r.startswith("["):
            continue
        a, _, b = r.partition("-")
        owns |= int(a) <= slot <= int(b or a)
    masters.append((f[0], port, owns))
masters.sort(key=lambda m: m[1])
i = [m[2] for m in masters].index(True)
o = masters[(i + 1) % len(masters)]
print(masters[i][0], masters[i][1], o[0], o[1])' "$2"
}

# migrate_slot PORTS... KEY: moves KEY's slot to the next master, as
# redis-cli --cluster reshard does: IMPORTING on the target, MIGRATING on
# the source, MIGRATE of its keys in batches, then SETSLOT NODE everywhere.
migrate_slot() {
    local key=${*: -1} ports=("${@:1:$#-1}") slot src_id src dst_id dst keys p
    slot=$("$REDIS_CLI" -p "${ports[0]}" cluster keyslot "$key")
    read -r src_id src dst_id dst < <(slot_nodes "${ports[0]}" "$slot")
    [ -n "$dst" ] || fail "no owner found for slot $slot" || return 1
    echo "moving slot $slot (key $key) from :$src to :$dst"
    [ "$("$REDIS_CLI" -p "$dst" cluster setslot "$slot" importing "$src_id")" = OK ] || fail "IMPORTING failed" || return 1
    [ "$("$REDIS_CLI" -p "$src" cluster setslot "$slot" migrating "$dst_id")" = OK ] || fail "MIGRATING failed" || return 1
    while keys=$("$REDIS_CLI" -p "$src" cluster getkeysinslot "$slot" 100) && [ -n "$keys" ]; do
        # shellcheck disable=SC2086 # one word per key
        "$REDIS_CLI" -p "$src" migrate 127.0.0.1 "$dst" "" 0 5000 keys $keys >/dev/null || fail "MIGRATE failed" || return 1
    done
    for p in "$dst" "$src" "${ports[@]}"; do
        "$REDIS_CLI" -p "$p" cluster setslot "$slot" node "$dst_id" >/dev/null
    done
}

# start_cluster DIR MASTERS REPLICAS: a Redis Cluster on loopback (MASTERS
# masters, REPLICAS replicas each; extra redis-server options in
# $CLUSTER_OPTS), made with redis-cli --cluster create; sets CLUSTER_PORTS
# (masters first, as created) and CLUSTER_PIDS (also in $PIDFILE: killed
# whatever happens). Returns once every node says cluster_state:ok.
start_cluster() {
    local dir=$1 masters=$2 replicas=$3 p i rc nodes=()
    CLUSTER_PORTS=()
    CLUSTER_PIDS=()
    for i in $(seq $((masters * (1 + replicas)))); do
        p=$(steady_port)
        [ -n "$p" ] || fail "no free port pair for a cluster node" || return 1
        CLUSTER_PORTS+=("$p")
        nodes+=("127.0.0.1:$p")
        mkdir -p "$dir/$p"
        # shellcheck disable=SC2086 # options, one word each
        "$REDIS_SERVER" --port "$p" --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file "$dir/$p/nodes.conf" \
            --dir "$dir/$p" --save '' --appendonly no --daemonize no ${CLUSTER_OPTS:-} >"$dir/$p/log" 2>&1 &
        CLUSTER_PIDS+=($!)
        echo "$!" >>"$PIDFILE"
    done
    for p in "${CLUSTER_PORTS[@]}"; do wait_ping "$p" || fail "cluster node :$p did not start: $(tail -3 "$dir/$p/log")" || return 1; done
    "$REDIS_CLI" --cluster create "${nodes[@]}" --cluster-replicas "$replicas" --cluster-yes \
        >"$dir/create.log" 2>&1 || fail "redis-cli --cluster create failed: $(tail -5 "$dir/create.log")" || return 1
    for i in $(seq 200); do
        rc=0
        for p in "${CLUSTER_PORTS[@]}"; do
            "$REDIS_CLI" -p "$p" cluster info | grep -q '^cluster_state:ok' || rc=1
            # MASTERS ranges: first slot, last slot and port of each, on every node
            [ "$("$REDIS_CLI" -p "$p" cluster slots | grep -c '^[0-9]*$')" -ge $((masters * 3)) ] || rc=1
        done
        [ $rc = 0 ] && break
        sleep 0.05
    done
    [ $rc = 0 ] || fail "the cluster did not become ok"
}

# A Redis Cluster of 3 masters on loopback ($CLUSTER_PORTS): queues 21 to
# 28 pushed and popped through one lTvmConnect to the first node (counts
# checked with redis-cli -c, keys spread over the nodes); then queue 21's
# slot migrated twice while records are pushed and popped: none lost, none
# twice, order kept.
t_net_cluster() {
    local dir=$NETDIR/cluster ports=("${CLUSTER_PORTS[@]}") p q len spread=0 stop rc
    run_bounded "$OUT/net_cluster" 127.0.0.1 "${ports[0]}" push 1000 || fail "net_cluster push failed" || return 1
    for q in $(seq 21 28); do
        len=$("$REDIS_CLI" -c -p "${ports[0]}" llen "$q")
        [ "$len" = 1000 ] || fail "queue $q holds $len records, want 1000" || return 1
    done
    for p in "${ports[@]}"; do
        [ "$("$REDIS_CLI" -p "$p" dbsize)" -gt 0 ] && spread=$((spread + 1))
    done
    [ $spread -ge 2 ] || fail "queues 21-28 are all on one node" || return 1
    run_bounded "$OUT/net_cluster" 127.0.0.1 "${ports[0]}" pop 1000 || fail "net_cluster pop failed" || return 1
    for q in $(seq 21 28); do
        len=$("$REDIS_CLI" -c -p "${ports[0]}" llen "$q")
        [ "$len" = 0 ] || fail "queue $q holds $len records after the pops" || return 1
    done

    stop=$dir/stop
    run_bounded "$OUT/net_cluster" 127.0.0.1 "${ports[0]}" run "$stop" >"$dir/run.log" 2>&1 &
    local runner=$!
    sleep 1
    migrate_slot "${ports[@]}" 21 || return 1
    sleep 1
    migrate_slot "${ports[@]}" 21 || return 1
    sleep 1
    touch "$stop"
    wait "$runner"
    rc=$?
    cat "$dir/run.log"
    [ $rc = 0 ] || fail "net_cluster run failed (status $rc)" || return 1
    grep -Eq '^pushed [1-9][0-9]* \+ [1-9][0-9]*, popped' "$dir/run.log" || fail "nothing was pushed during the migrations" || return 1
    len=$("$REDIS_CLI" -c -p "${ports[0]}" llen 21)
    [ "$len" = 0 ] || fail "queue 21 holds $len records after the run"
}

echo "== network: redis-server"
NETDIR=$(mktemp -d /tmp/tvmq-ctests-net.XXXXXX)
TMPDIRS+=("$NETDIR")
if [ -z "$REDIS_SERVER" ] || [ -z "$REDIS_CLI" ]; then
    echo "FAIL  network  (redis-server and redis-cli are needed: apt-get install redis-server redis-tools)"
    FAILED=$((FAILED + 1))
    FAILED_NAMES+=(network)
else
    REDIS_PORT=$(free_port)
    REDIS_SOCK=$NETDIR/redis.sock
    "$REDIS_SERVER" --port "$REDIS_PORT" --bind 127.0.0.1 --unixsocket "$REDIS_SOCK" --unixsocketperm 700 \
        --save '' --appendonly no --daemonize no --dir "$NETDIR" >"$NETDIR/redis.log" 2>&1 &
    REDIS_PID=$!
    echo "$REDIS_PID" >>"$PIDFILE"
    export REDIS_PORT REDIS_SOCK
    if ! wait_ping "$REDIS_PORT"; then
        echo "FAIL  network_redis_start  (redis-server did not answer: $(tail -3 "$NETDIR/redis.log"))"
        FAILED=$((FAILED + 1))
        FAILED_NAMES+=(network_redis_start)
    else
        for prog in net_push net_pop test_net net_admin net_lease net_lease_kill; do
            if ! build_prog "$prog" >"$LOGDIR/build-$prog.log" 2>&1; then
                echo "FAIL  build_$prog"
                sed -e 's/^/      | /' "$LOGDIR/build-$prog.log" | head -n 40
                FAILED=$((FAILED + 1))
                FAILED_NAMES+=("build_$prog")
            fi
        done
        if [ -x "$OUT/net_push" ] && [ -x "$OUT/net_pop" ]; then
            run_net_twins redis "$REDIS_PORT" "$REDIS_SOCK"
        fi
        if ! build_prog net_cluster >"$LOGDIR/build-net_cluster.log" 2>&1; then
            echo "FAIL  build_net_cluster"
            sed -e 's/^/      | /' "$LOGDIR/build-net_cluster.log" | head -n 40
            FAILED=$((FAILED + 1))
            FAILED_NAMES+=(build_net_cluster)
        elif ! start_cluster "$NETDIR/cluster" 3 0 >"$LOGDIR/cluster-start.log" 2>&1; then
            echo "FAIL  net_redis_cluster_start  ($(tail -3 "$LOGDIR/cluster-start.log"))"
            FAILED=$((FAILED + 1))
            FAILED_NAMES+=(net_redis_cluster_start)
        else
            run_test net_redis_cluster_3_masters_migration t_net_cluster
            if [ -x "$OUT/net_lease" ] && [ -x "$OUT/net_lease_kill" ]; then
                run_test net_redis_cluster_lease_sequence t_net_lease "${CLUSTER_PORTS[0]}" redis
                run_test net_redis_cluster_lease_consumers_killed t_net_lease_kill "${CLUSTER_PORTS[0]}" -c
            fi
            if build_prog net_spread >"$LOGDIR/build-net_spread.log" 2>&1; then
                run_test net_redis_cluster_spread_queue_every_master t_net_spread "${CLUSTER_PORTS[@]}"
            else
                echo "FAIL  build_net_spread"
                sed -e 's/^/      | /' "$LOGDIR/build-net_spread.log" | head -n 40
                FAILED=$((FAILED + 1))
                FAILED_NAMES+=(build_net_spread)
            fi
            kill -KILL "${CLUSTER_PIDS[@]}" 2>/dev/null
            wait "${CLUSTER_PIDS[@]}" 2>/dev/null
        fi
        if [ -x "$OUT/test_net" ]; then
            for t in $("$OUT/test_net" --list); do
                run_test "test_net.$t" t_api test_net "$t"
            done
        fi
        if [ -x "$OUT/net_admin" ]; then
            run_test net_redis_count_truncate_drop_reset t_net_admin "$REDIS_PORT" redis
        fi
        if [ -x "$OUT/net_lease" ]; then
            run_test net_local_lease_sequence t_net_lease local
            run_test net_redis_lease_sequence t_net_lease "$REDIS_PORT" redis
        fi
        if [ -x "$OUT/net_lease_kill" ]; then
            run_test net_redis_lease_consumers_killed t_net_lease_kill "$REDIS_PORT"
        fi
    fi
    kill -KILL "$REDIS_PID" 2>/dev/null
    wait "$REDIS_PID" 2>/dev/null
fi

# tvmq serve, once it is built (it is being written alongside the client).
echo "== network: tvmq serve"
if ! "$TVMQ" serve --help >/dev/null 2>&1; then
    echo "SKIP  network_tvmq_serve  ($TVMQ serve is not built yet)"
    SKIPPED=$((SKIPPED + 1))
elif [ -x "$OUT/net_push" ] && [ -x "$OUT/net_pop" ]; then
    TVMQ_PORT=$(free_port)
    TVMQ_SOCK=$NETDIR/tvmq.sock
    mkdir -p "$NETDIR/queues"
    "$TVMQ" serve --port "$TVMQ_PORT" --unixsocket "$TVMQ_SOCK" --dir "$NETDIR/queues" \
        --auto-create "$((NET_ASYNC_ROWS * 2))x304" >"$NETDIR/tvmq.log" 2>&1 &
    TVMQ_PID=$!
    echo "$TVMQ_PID" >>"$PIDFILE"
    if ! wait_ping "$TVMQ_PORT"; then
        echo "FAIL  network_tvmq_serve_start  (tvmq serve did not answer: $(tail -3 "$NETDIR/tvmq.log"))"
        FAILED=$((FAILED + 1))
        FAILED_NAMES+=(network_tvmq_serve_start)
    else
        run_net_twins tvmq "$TVMQ_PORT" "$TVMQ_SOCK"
        if [ -x "$OUT/net_admin" ]; then
            run_test net_tvmq_count_truncate_drop_reset t_net_admin "$TVMQ_PORT" tvmq
        fi
        if [ -x "$OUT/net_lease" ]; then
            run_test net_tvmq_lease_sequence_owner_mode t_net_lease "$TVMQ_PORT" tvmq "$NETDIR/queues"
        fi
    fi
    kill -TERM "$TVMQ_PID" 2>/dev/null
    wait "$TVMQ_PID" 2>/dev/null
fi

# Failover (c-tests/failover.sh): the Redis master killed with SIGKILL and
# restarted as a replica while producers push with lTvmRequireReplicas(p, 1,
# ...) and leasing consumers run, behind three sentinels
# (lTvmConnectSentinel) and in a Redis Cluster with replicas; once each here
# ($FAILOVERS), five times in `make failover`.
t_failover() { TIMEOUT=300 run_bounded bash "$SRC/failover.sh" "$1" "$FAILOVERS" "$OUT" "$LIBDIR"; }
# (auth: lTvmSentinelAuth and lTvmAuth, net_sentinel_auth.c, no failover;
# tls: lTvmConnectSentinelTls through one failover, net_sentinel_tls.c)
echo "== network: failover"
FAILOVERS=${FAILOVERS:-1}
if [ -z "$REDIS_SERVER" ] || [ -z "$REDIS_CLI" ]; then
    echo "SKIP  network_failover  (redis-server and redis-cli are needed)"
    SKIPPED=$((SKIPPED + 1))
else
    run_test net_sentinel_auth t_failover auth
    if command -v openssl >/dev/null; then
        run_test net_sentinel_tls t_failover tls
    else
        echo "FAIL  net_sentinel_tls  (the openssl command is needed to make the test certificates: apt-get install openssl)"
        FAILED=$((FAILED + 1))
        FAILED_NAMES+=(net_sentinel_tls)
    fi
    for kind in sentinel cluster; do
        run_test "net_${kind}_failover_${FAILOVERS}x" t_failover "$kind"
    done
fi

# lTvmAuth (net_auth.c) against a `$TVMQ serve --requirepass` and a
# `redis-server --requirepass`, each started here for it.
echo "== network: lTvmAuth"
if [ -z "$REDIS_SERVER" ] || [ -z "$REDIS_CLI" ]; then
    echo "SKIP  network_auth  (redis-server and redis-cli are needed)"
    SKIPPED=$((SKIPPED + 1))
elif ! build_prog net_auth >"$LOGDIR/build-net_auth.log" 2>&1; then
    echo "FAIL  build_net_auth"
    sed -e 's/^/      | /' "$LOGDIR/build-net_auth.log" | head -n 40
    FAILED=$((FAILED + 1))
    FAILED_NAMES+=(build_net_auth)
else
    AUTH_PASS="tvmq-ctests-$RANDOM$RANDOM"
    auth_ping() { [ "$(REDISCLI_AUTH=$AUTH_PASS "$REDIS_CLI" -p "$1" ping 2>/dev/null)" = PONG ]; }
    AUTH_PORT=$(free_port)
    mkdir -p "$NETDIR/auth-queues"
    TVMQ_REQUIREPASS=$AUTH_PASS "$TVMQ" serve --port "$AUTH_PORT" --dir "$NETDIR/auth-queues" \
        --auto-create 100x304 >"$NETDIR/tvmq-auth.log" 2>&1 &
    AUTH_PID=$!
    echo "$AUTH_PID" >>"$PIDFILE"
    REDIS_AUTH_PORT=$(free_port)
    "$REDIS_SERVER" --port "$REDIS_AUTH_PORT" --bind 127.0.0.1 --requirepass "$AUTH_PASS" --save '' \
        --appendonly no --daemonize no --dir "$NETDIR" >"$NETDIR/redis-auth.log" 2>&1 &
    REDIS_AUTH_PID=$!
    echo "$REDIS_AUTH_PID" >>"$PIDFILE"
    for kind in tvmq redis; do
        port=$AUTH_PORT
        [ $kind = redis ] && port=$REDIS_AUTH_PORT
        for _ in $(seq 100); do auth_ping "$port" && break; sleep 0.05; done
        run_test "net_${kind}_auth" run_bounded "$OUT/net_auth" 127.0.0.1 "$port" "$AUTH_PASS"
    done
    kill -TERM "$AUTH_PID" "$REDIS_AUTH_PID" 2>/dev/null
    wait "$AUTH_PID" "$REDIS_AUTH_PID" 2>/dev/null
fi

# TLS: lTvmConnectTls (test_tls.c) against two `$TVMQ serve --tls-port` (one
# requiring client certificates) and a `redis-server --tls-port`, with
# certificates made here by scripts/tls-certs.sh (the openssl command).
echo "== network: TLS"
TLSDIR=$NETDIR/tls
if ! "$TVMQ" serve --help 2>/dev/null | grep -q -- --tls-port; then
    echo "SKIP  network_tls  ($TVMQ serve has no --tls-port)"
    SKIPPED=$((SKIPPED + 1))
elif ! command -v openssl >/dev/null; then
    echo "FAIL  network_tls  (the openssl command is needed to make the test certificates: apt-get install openssl)"
    FAILED=$((FAILED + 1))
    FAILED_NAMES+=(network_tls)
elif ! bash "$ROOT/scripts/tls-certs.sh" "$TLSDIR" >"$LOGDIR/tls-certs.log" 2>&1; then
    echo "FAIL  network_tls_certificates  ($(tail -3 "$LOGDIR/tls-certs.log"))"
    FAILED=$((FAILED + 1))
    FAILED_NAMES+=(network_tls_certificates)
elif ! build_prog test_tls >"$LOGDIR/build-test_tls.log" 2>&1; then
    echo "FAIL  build_test_tls"
    sed -e 's/^/      | /' "$LOGDIR/build-test_tls.log" | head -n 40
    FAILED=$((FAILED + 1))
    FAILED_NAMES+=(build_test_tls)
else
    TLS_PIDS=()
    TLS_OK=1
    TLS_CERTS=(--tls-cert-file "$TLSDIR/server.crt" --tls-key-file "$TLSDIR/server.key")
    for kind in plain mtls; do
        port=$(free_port)
        extra=()
        [ $kind = mtls ] && extra=(--tls-ca-cert-file "$TLSDIR/ca.crt")
        mkdir -p "$NETDIR/tls-$kind"
        "$TVMQ" serve --port 0 --tls-port "$port" "${TLS_CERTS[@]}" "${extra[@]}" --dir "$NETDIR/tls-$kind" \
            --auto-create 10000x64 >"$NETDIR/tls-$kind.log" 2>&1 &
        TLS_PIDS+=($!)
        echo "$!" >>"$PIDFILE"
        if [ $kind = plain ]; then TLS_TVMQ_PORT=$port; else TLS_MTLS_PORT=$port; fi
    done
    export TLS_DIR=$TLSDIR TLS_TVMQ_PORT TLS_MTLS_PORT
    for port in "$TLS_TVMQ_PORT" "$TLS_MTLS_PORT"; do
        ok=0
        for _ in $(seq 100); do
            "$REDIS_CLI" --tls --cacert "$TLSDIR/ca.crt" --cert "$TLSDIR/client.crt" --key "$TLSDIR/client.key" \
                -p "$port" ping 2>/dev/null | grep -q PONG && { ok=1; break; }
            sleep 0.05
        done
        if [ $ok = 0 ]; then
            echo "FAIL  network_tls_tvmq_serve_start  (port $port: $(tail -3 "$NETDIR"/tls-*.log))"
            FAILED=$((FAILED + 1))
            FAILED_NAMES+=(network_tls_tvmq_serve_start)
            TLS_OK=0
        fi
    done
    # redis-server: only if it was built with TLS (else the Redis tests are
    # skipped, saying why).
    REDIS_TLS_PORT=$(free_port)
    mkdir -p "$NETDIR/redis-tls"
    "$REDIS_SERVER" --port 0 --tls-port "$REDIS_TLS_PORT" --bind 127.0.0.1 "${TLS_CERTS[@]}" \
        --tls-ca-cert-file "$TLSDIR/ca.crt" --tls-auth-clients optional --save '' --appendonly no \
        --dir "$NETDIR/redis-tls" >"$NETDIR/redis-tls.log" 2>&1 &
    REDIS_TLS_PID=$!
    echo "$REDIS_TLS_PID" >>"$PIDFILE"
    redis_tls=0
    for _ in $(seq 100); do
        "$REDIS_CLI" --tls --cacert "$TLSDIR/ca.crt" -p "$REDIS_TLS_PORT" ping 2>/dev/null | grep -q PONG && { redis_tls=1; break; }
        kill -0 "$REDIS_TLS_PID" 2>/dev/null || break
        sleep 0.05
    done
    if [ $redis_tls = 1 ]; then
        export TLS_REDIS_PORT=$REDIS_TLS_PORT
    else
        unset TLS_REDIS_PORT
        echo "SKIP  test_tls.redis_server_calls  (redis-server --tls-port is unavailable: $(grep -m1 -i -e tls -e error "$NETDIR/redis-tls.log"))"
        SKIPPED=$((SKIPPED + 1))
    fi
    if [ $TLS_OK = 1 ]; then
        for t in $("$OUT/test_tls" --list); do
            [ $t = redis_server_calls ] && [ $redis_tls = 0 ] && continue
            run_test "test_tls.$t" t_api test_tls "$t"
        done
    fi
    kill -KILL "$REDIS_TLS_PID" 2>/dev/null
    wait "$REDIS_TLS_PID" 2>/dev/null
    for pid in "${TLS_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
fi

# security.sh prints run.sh's PASS/FAIL lines itself (or one SKIP line when
# not root): they are shown and counted here. It switches users and may wait
# for another run's lock, so it gets a longer bound than one program.
echo "== security"
TIMEOUT=300 run_bounded env LIBDIR="$LIBDIR" TVMQ="$TVMQ" bash "$SRC/security.sh" >"$LOGDIR/security.out" 2>&1
rc=$?
sec_failed=0
while IFS= read -r line; do
    echo "$line"
    case $line in
        "PASS  "*) PASSED=$((PASSED + 1)) ;;
        "FAIL  "*) FAILED=$((FAILED + 1)); sec_failed=1; read -r _ name _ <<<"$line"; FAILED_NAMES+=("$name") ;;
        "SKIP "*) SKIPPED=$((SKIPPED + 1)) ;;
    esac
done <"$LOGDIR/security.out"
if [ $rc -ne 0 ] && [ $sec_failed -eq 0 ]; then
    echo "FAIL  security  (security.sh exited with status $rc)"
    FAILED=$((FAILED + 1))
    FAILED_NAMES+=(security)
fi

secs=$(( ($(now_ms) - SUITE_START) / 1000 ))
echo
echo "c-tests: $PASSED passed, $FAILED failed, $SKIPPED skipped, $((PASSED + FAILED + SKIPPED)) total in ${secs}s"
if [ $FAILED -ne 0 ]; then
    echo "failed: ${FAILED_NAMES[*]}"
    exit 1
fi
exit 0
