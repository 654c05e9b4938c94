#!/usr/bin/env bash
# `make test-readme`: the README's snippets run as written. Its ```c blocks
# are compiled (-Werror) against the build tree and run; its ```python blocks
# run with the package installed by `make test-python`; its ```rust blocks are
# doc tests of the library (src/lib.rs includes the README under cfg(doctest)),
# run by `make test-rust`. The ```sh commands are those scripts/test-install.sh
# and scripts/test-python.sh run. Then what the README says of `make run`: it
# keeps to a queue directory of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$PWD/target/readme
rm -rf "$OUT"; mkdir -p "$OUT"
awk -v out="$OUT" '
    /^```/ {
        if (!open) { open = 1; lang = substr($0, 4); n[lang]++; file = out "/" lang "-" n[lang]; next }
        open = 0; close(file); next
    }
    open && (lang == "c" || lang == "python") { print > file }
' README.md
TVMDBD=$(mktemp -d /dev/shm/tvmq-readme.XXXXXX)
export TVMDBD
trap 'rm -rf "$TVMDBD"' EXIT
LIB=${LIBDIR:-$PWD/target/release}   # the Makefile passes its LIBDIR
count=0
for f in "$OUT"/c-*; do
    [ -e "$f" ] || continue
    mv "$f" "$f.c"
    gcc -O2 -Wall -Werror -o "$f" "$f.c" -I include -L "$LIB" -ltvm -lpthread "-Wl,-rpath,$LIB"
    "$f" > "$f.out" || { echo "README C snippet $f failed" >&2; exit 1; }
    count=$((count + 1))
done
for f in "$OUT"/python-*; do
    [ -e "$f" ] || continue
    TVMQ_LIB=$LIB/libtvm.so "$PWD/target/py/bin/python" "$f" > "$f.out" || { echo "README Python snippet $f failed" >&2; exit 1; }
    count=$((count + 1))
done
grep -q "7 hello from C" "$OUT"/c-1.out
grep -q "7 hello from Python" "$OUT"/python-1.out
grep -q "empty: 24 NO_DATA_FOUND" "$OUT"/python-1.out

# `make run` (scripts/run.sh) works in a directory of its own: a queue 21 in
# $TVMDBD is left as it was, and nothing of the run's stays in /dev/shm, also
# when it is interrupted (Ctrl-C) or fails.
TVMQ=$LIB/tvmq
"$TVMQ" create 21 --rows 8 --size 16 --name USERS_OWN >/dev/null
TVMQ_LIB=$LIB/libtvm.so "$PWD/target/py/bin/python" -c 'import tvmq; tvmq.Queue(21).push(b"mine")'
run_dir() { sed -n 's/^queue 21 in \(\/dev\/shm\/tvmq-run\.[A-Za-z0-9]*\) .*/\1/p' "$1"; }
kept() {
    [ "$("$TVMQ" stat 21 | awk '$1 == "name" { print $2 }')" = USERS_OWN ] &&
    [ "$("$TVMQ" stat 21 | awk '$1 == "depth" { print $2 }')" = 1 ] || { echo "make run touched the user's queue 21 ($1)" >&2; exit 1; }
}
TVMQ=$TVMQ SEEDBIN=$PWD/target/seed ROWS=20000 THREADS="1 2" bash scripts/run.sh > "$OUT/run.out"
d=$(run_dir "$OUT/run.out"); [ -n "$d" ] && [ ! -e "$d" ] || { echo "make run left ${d:-its directory} behind" >&2; exit 1; }
grep -q "^2 " "$OUT/run.out"
kept "a whole run"
fake=$OUT/fake-seed; mkdir -p "$fake"
printf '#!/bin/sh\nexec sleep 30\n' > "$fake/push_bench"; chmod +x "$fake/push_bench"
# Ctrl-C once the run says where it works (a fixed second was a guess: on
# a busy machine the interrupt could come before, and no directory was
# named): SIGINT to the run's process group, as a terminal sends it.
set -m   # the run in a process group of its own, SIGINT not ignored (as without job control)
env TVMQ="$TVMQ" SEEDBIN="$fake" ROWS=1000 THREADS=1 bash scripts/run.sh > "$OUT/run-int.out" 2>&1 &
run=$!
set +m
for _ in $(seq 600); do [ -n "$(run_dir "$OUT/run-int.out")" ] && break; sleep 0.05; done
kill -INT -- -"$run" 2>/dev/null || true
wait "$run" || true
d=$(run_dir "$OUT/run-int.out"); [ -n "$d" ] && [ ! -e "$d" ] || { echo "make run interrupted left ${d:-its directory} behind" >&2; exit 1; }
printf '#!/bin/sh\necho error; exit 3\n' > "$fake/push_bench"
if TVMQ=$TVMQ SEEDBIN=$fake ROWS=1000 THREADS=1 bash scripts/run.sh > "$OUT/run-fail.out" 2>&1; then
    echo "make run did not fail with a failing program" >&2; exit 1
fi
d=$(run_dir "$OUT/run-fail.out"); [ -n "$d" ] && [ ! -e "$d" ] || { echo "make run failing left ${d:-its directory} behind" >&2; exit 1; }
kept "interrupted and failed runs"
echo "test-readme: $count C and Python snippets of the README ran as written (the Rust ones are doc tests); make run kept to its own directory"
