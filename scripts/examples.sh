#!/usr/bin/env bash
# `make examples`: builds every example (C with -Werror, C++ with g++, Rust)
# and runs each, in a fresh queue directory; fails on the first that fails.
#   examples/c/queue_demo.c          lTableQueue, threads, lPop, lPopup
#   examples/c/orders_{producer,consumer}.c  two processes; lPopup with a timeout
#   examples/cpp/queue.cpp           tvm.h from C++ (RAII handle, std::thread)
#   examples/rust/{basic,producer,consumer}.rs  the safe Rust API
set -euo pipefail
cd "$(dirname "$0")/.."
LIB=${LIBDIR:-$PWD/target/release}   # the Makefile passes its LIBDIR
OUT=$PWD/target/examples
mkdir -p "$OUT"
CFLAGS=(-O2 -Wall -Werror -I include)
LINK=(-L "$LIB" -ltvm -lpthread "-Wl,-rpath,$LIB")
for p in queue_demo orders_producer orders_consumer; do
    gcc "${CFLAGS[@]}" -o "$OUT/$p" "examples/c/$p.c" "${LINK[@]}"
done
g++ -std=c++17 "${CFLAGS[@]}" -o "$OUT/queue_cpp" examples/cpp/queue.cpp "${LINK[@]}"
# --workspace, as make build: with -p tvmq alone Cargo resolves other features,
# rebuilds the library and, after it, make's next build rebuilds every crate.
cargo build -q --profile ci --workspace --examples
EXAMPLES=$PWD/target/ci/examples   # the profile make test builds its tests with (Cargo.toml)

TVMDBD=$(mktemp -d /dev/shm/tvmq-examples.XXXXXX)
export TVMDBD
trap 'rm -rf "$TVMDBD"' EXIT
step() { echo "== $*"; }

step queue_demo; "$OUT/queue_demo"
step "orders: consumer and producer in two processes"
"$OUT/orders_consumer" > "$OUT/consumer.out" & consumer=$!
"$OUT/orders_producer" 20000
wait "$consumer"; cat "$OUT/consumer.out"
grep -q "consumer: 20000 orders in order" "$OUT/consumer.out"
step "C++"; "$OUT/queue_cpp"
step "Rust: basic"; "$EXAMPLES/basic"
step "Rust: consumer and producer in two processes"
"$EXAMPLES/consumer" > "$OUT/rust-consumer.out" & consumer=$!
"$EXAMPLES/producer" 20000
wait "$consumer"; cat "$OUT/rust-consumer.out"
grep -q "consumer: 20000 records in order" "$OUT/rust-consumer.out"
echo "examples: all built and ran"
