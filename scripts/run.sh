#!/usr/bin/env bash
# `make run`: create queue 21 (ROWS records of 304 bytes), run the seed
# programs push then pop at each thread count, print a table.
# It works in a queue directory of its own under /dev/shm, removed at the
# end (also on failure and on Ctrl-C): the user's $TVMDBD and default
# directory, and their queue 21, are never touched.
set -euo pipefail

# rate RECORDS MS: the rate a cost_time of MS milliseconds gives. The seed
# programs time with a 1 ms clock, so MS stands for anything between MS-1
# and MS+1: below 100 ms the rate is that range (a larger ROWS narrows it).
rate() {
    awk -v n="$1" -v ms="$2" 'BEGIN {
        if (ms >= 100) { printf "%.2f M/s", n / ms / 1000; exit }
        if (ms <= 1) { printf "> %.3g M/s", n / (ms + 1) / 1000; exit }
        printf "%.3g-%.3g M/s", n / (ms + 1) / 1000, n / (ms - 1) / 1000
    }'
}
if [ "${1:-}" = --rate ]; then # scripts/test-run.sh checks it
    rate "$2" "$3"
    exit
fi

: "${TVMQ:?}" "${SEEDBIN:?}" "${ROWS:=4000000}" "${THREADS:=1 2 4 10}"

TVMDBD=$(mktemp -d /dev/shm/tvmq-run.XXXXXX)
export TVMDBD
cleanup() {
    "$TVMQ" drop 21 >/dev/null 2>&1 || true   # wakes anything still blocked on it
    rm -rf "$TVMDBD"
}
trap cleanup EXIT
trap 'echo "make run: interrupted" >&2; exit 130' INT
trap 'exit 143' TERM

"$TVMQ" create 21 --rows "$ROWS" --size 304 --name QUEUE_USER_INFO >/dev/null
echo "queue 21 in $TVMDBD (a directory of this run's own, removed at the end)"

# cost_time:[N] -> N, failing loudly on anything else.
cost() {
    local out
    if ! out=$("$@" 2>&1); then echo "error: $* failed: $out" >&2; return 1; fi
    if grep -q "error" <<<"$out"; then echo "error: $*: $out" >&2; return 1; fi
    sed -n 's/.*cost_time:\[\([0-9]*\)\].*/\1/p' <<<"$out"
}

printf '\n%-8s | %10s %16s | %10s %16s\n' threads "push ms" "push rate" "pop ms" "pop rate"
printf -- '---------+-----------------------------+-----------------------------\n'
short=0
for n in $THREADS; do
    push=$(cost "$SEEDBIN/push_bench" "$n" "$ROWS")
    depth=$("$TVMQ" stat 21 | awk '$1 == "depth" { print $2 }')
    pop=$(cost "$SEEDBIN/pop_bench" "$n" "$ROWS")
    left=$("$TVMQ" stat 21 | awk '$1 == "depth" { print $2 }')
    # Each thread handles ROWS / n records (integer division, as the programs do).
    total=$(( ROWS / n * n ))
    if [ "$depth" != "$total" ] || [ "$left" != 0 ]; then
        echo "error: $n threads: queue held $depth after push (expected $total) and $left after pop" >&2
        exit 1
    fi
    printf '%-8s | %10s %16s | %10s %16s\n' "$n" "$push" "$(rate "$total" "$push")" "$pop" "$(rate "$total" "$pop")"
    if [ "$push" -lt 100 ] || [ "$pop" -lt 100 ]; then short=1; fi
done
echo
echo "Records of 304 bytes, $ROWS per run."
if [ "$short" = 1 ]; then
    echo "A rate given as a range: the programs time with a 1 ms clock, so under 100 ms a time is +-1 ms; a larger ROWS narrows it."
fi
echo "STVM on this machine type, 1 thread: about 1.8 M/s push and 1.6 M/s pop (4,000,000 records in ~2,200 and ~2,500 ms; docs/stvm.md)."
