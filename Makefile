# tvmq: `make` builds, `make run` runs the seed benchmark, `make test` runs
# everything CI checks. See README.md.

CARGO   ?= cargo
LIBDIR  := $(CURDIR)/target/release
TVMQ    := $(LIBDIR)/tvmq
# The seed programs, compiled unchanged: from ../shared/seed when present,
# else the byte-identical copies committed in c-tests/seed (checked by `make test`).
SEED    := $(if $(wildcard ../shared/seed/push_bench.c),../shared/seed,c-tests/seed)
SEEDBIN := $(CURDIR)/target/seed
CFLAGS  ?= -O2 -Wall
ROWS    ?= 4000000
THREADS ?= 1 2 4 10

.PHONY: all build run test test-rust test-c seed clean loom

all: build

build:
	$(CARGO) build --release --lib --bins

# Compile the two seed programs, unchanged, against our header and library.
seed: build
	@mkdir -p $(SEEDBIN)
	gcc $(CFLAGS) -o $(SEEDBIN)/push_bench $(SEED)/push_bench.c -I include -L $(LIBDIR) -ltvm -lpthread -Wl,-rpath,$(LIBDIR)
	gcc $(CFLAGS) -o $(SEEDBIN)/pop_bench  $(SEED)/pop_bench.c  -I include -L $(LIBDIR) -ltvm -lpthread -Wl,-rpath,$(LIBDIR)

# The main job: queue 21 with room for $(ROWS) records of 304 bytes, the seed
# programs pushing then popping at each thread count, and a results table.
run: seed
	@TVMQ=$(TVMQ) SEEDBIN=$(SEEDBIN) ROWS=$(ROWS) THREADS="$(THREADS)" bash scripts/run.sh

test: build test-rust test-c

test-rust:
	$(CARGO) test --release --all-targets

test-c: seed
	@LIBDIR=$(LIBDIR) SEED=$(SEED) SEEDBIN=$(SEEDBIN) TVMQ=$(TVMQ) bash c-tests/run.sh

clean:
	$(CARGO) clean

# Model checking of the ring with loom (not in `make test`: minutes of CPU).
loom:
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test --release --lib loom -- --test-threads=1
