#!/usr/bin/env bash
# `make test-readme`: the README's snippets run as written. Its ```c blocks
# are compiled (-Werror) against the build tree and run; its ```python blocks
# run with the package installed by `make test-python`; its ```rust blocks are
# doc tests of the library (src/lib.rs includes the README under cfg(doctest)),
# run by `make test-rust`. The ```sh commands are those scripts/test-install.sh
# and scripts/test-python.sh run.
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
LIB=$PWD/target/release
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
echo "test-readme: $count C and Python snippets of the README ran as written (the Rust ones are doc tests)"
