#!/usr/bin/env bash
# `make test-install`: `make install` into a temporary prefix (with DESTDIR,
# as a packager does), then the seed programs built with pkg-config against
# the installed files, dynamically and statically, and run; `make uninstall`
# must then remove every file it installed.
set -euo pipefail
cd "$(dirname "$0")/.."
SEED=$( [ -f ../shared/seed/push_bench.c ] && echo ../shared/seed || echo c-tests/seed )
work=$(mktemp -d /tmp/tvmq-install.XXXXXX)
queues=$(mktemp -d /dev/shm/tvmq-install-q.XXXXXX)
trap 'rm -rf "$work" "$queues"' EXIT
prefix=/opt/tvmq-test
stage=$work/stage
fail() { echo "test-install: $*" >&2; exit 1; }

make -s install PROFILE="${PROFILE:-release}" PREFIX=$prefix DESTDIR=$stage >/dev/null
root=$stage$prefix
for f in lib/libtvm.so lib/libtvm.so.0 lib/libtvm.a include/tvm.h include/tmain.h bin/tvmq \
         share/man/man1/tvmq.1 share/man/man1/tvmq-create.1 share/man/man1/tvmq-serve.1 \
         share/bash-completion/completions/tvmq share/zsh/site-functions/_tvmq \
         share/fish/vendor_completions.d/tvmq.fish lib/pkgconfig/tvm.pc lib/pkgconfig/tvm-static.pc; do
    [ -e "$root/$f" ] || fail "$f was not installed"
done
[ "$(readlink "$root/lib/libtvm.so")" = libtvm.so.0 ] || fail "libtvm.so does not point to libtvm.so.0"
real=$(readlink "$root/lib/libtvm.so.0")
[[ "$real" =~ ^libtvm\.so\.0\.[0-9]+\.[0-9]+$ ]] || fail "libtvm.so.0 points to $real"
soname=$(objdump -p "$root/lib/$real" | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = libtvm.so.0 ] || fail "soname is '$soname', not libtvm.so.0"

# The .pc files name the final prefix; point pkg-config at the staged copy.
export PKG_CONFIG_PATH=$root/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$stage
[ "$(pkg-config --modversion tvm)" = "${real#libtvm.so.}" ] || fail "pkg-config version"
bin=$work/bin; mkdir -p "$bin"
for p in push_bench pop_bench; do
    # shellcheck disable=SC2046
    gcc -O2 -Wall -o "$bin/$p" "$SEED/$p.c" $(pkg-config --cflags --libs tvm) -Wl,-rpath,"$root/lib"
    # shellcheck disable=SC2046
    gcc -O2 -Wall -o "$bin/$p-static" "$SEED/$p.c" $(pkg-config --cflags --libs tvm-static)
done
ldd "$bin/push_bench" | grep -q "libtvm.so.0 => $root/lib/libtvm.so.0" || fail "dynamic build does not use the installed libtvm.so.0"
# As the README says: without the rpath, a prefix outside the loader's path is
# found only with LD_LIBRARY_PATH (or ldconfig).
# shellcheck disable=SC2046
gcc -O2 -Wall -o "$bin/push_bench-norpath" "$SEED/push_bench.c" $(pkg-config --cflags --libs tvm)
if out=$("$bin/push_bench-norpath" 1 1 2>&1); then fail "push_bench without rpath found libtvm.so.0 by itself"; fi
[[ "$out" == *"libtvm.so.0: cannot open shared object file"* ]] || fail "push_bench without rpath: $out"
if ldd "$bin/push_bench-static" | grep -q libtvm; then fail "static build still needs libtvm.so"; fi

export TVMDBD=$queues
"$root/bin/tvmq" create 21 --rows 20000 --size 304 >/dev/null
for kind in "" -static; do
    out=$("$bin/push_bench$kind" 2 10000); [[ "$out" == *cost_time* ]] || fail "push_bench$kind: $out"
    depth=$("$root/bin/tvmq" stat 21 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["depth"])')
    [ "$depth" = 10000 ] || fail "after push_bench$kind the queue holds $depth, not 10000"
    out=$("$bin/pop_bench$kind" 2 10000); [[ "$out" == *cost_time* ]] || fail "pop_bench$kind: $out"
    depth=$("$root/bin/tvmq" stat 21 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["depth"])')
    [ "$depth" = 0 ] || fail "after pop_bench$kind the queue holds $depth"
done
out=$(LD_LIBRARY_PATH=$root/lib "$bin/push_bench-norpath" 1 10); [[ "$out" == *cost_time* ]] || fail "LD_LIBRARY_PATH: $out"
man -l "$root/share/man/man1/tvmq.1" 2>/dev/null | grep -q peek || grep -q peek "$root/share/man/man1/tvmq.1" || fail "man page"
grep -q 'dead\\-letter' "$root/share/man/man1/tvmq-create.1" || fail "tvmq-create(1) lacks --dead-letter"

make -s uninstall PROFILE="${PROFILE:-release}" PREFIX=$prefix DESTDIR=$stage >/dev/null
left=$(find "$stage" -type f -o -type l)
[ -z "$left" ] || fail "uninstall left: $left"
echo "test-install: installed, built the seeds with pkg-config (dynamic and static), ran them, uninstalled: ok"
