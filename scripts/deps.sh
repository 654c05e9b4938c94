#!/usr/bin/env bash
# scripts/deps.sh: the packages `make test` needs beyond the machine's Rust,
# and their installation. One list (below) for `make test` and .ci/run.
#
#   bash scripts/deps.sh list              every package: present or missing, and why it is needed
#   bash scripts/deps.sh missing           the names of the missing ones (those this user's tests need)
#   bash scripts/deps.sh start STATEDIR    what `make test` runs first: as root, installs with apt-get
#                                          what the build and the Rust tests need, then starts the
#                                          install of the rest in the background (log and exit
#                                          status in STATEDIR); as another user, prints the one
#                                          command that installs what is missing and fails
#   bash scripts/deps.sh wait STATEDIR     waits for that background install (make's WAIT_DEPS)
#
# --dry-run (first argument), or DEPS_DRY_RUN=1: print the apt-get commands
# instead of running them. For testing the logic without touching the
# machine (scripts/test-deps.sh): DEPS_PATH replaces $PATH for the command
# checks, DEPS_ROOT is put before every file checked, DEPS_UID replaces the
# user id, DEPS_WAIT_LIMIT the seconds `wait` waits at most (1800).
set -euo pipefail

# The list: one package a line.
#   phase    now:  the build, `make lint` and the Rust tests need it (installed first)
#            later: only the targets after the Rust tests (test-c, bench-smoke, ...) need it:
#                   installed in the background while the build and the Rust tests run
#            root: needed only when make test runs as root (the tests that need root)
#   check    cmd NAME...   every command is found (in $PATH, /usr/sbin, /sbin)
#            any NAME...   one of the commands is found
#            file PATH     the file exists
#            py MODULE...  python3 imports every module
#   # why    what needs it
# To add a package: one line, in the phase of the first target that needs it.
LIST=$(cat <<'EOF'
now    gcc                cmd gcc                            # the C ABI's tests, the seed programs, cc for build scripts
now    g++                cmd g++                            # examples/cpp, the Boost.Interprocess bench driver
now    make               cmd make                           # make itself
now    pkg-config         cmd pkg-config                     # make test-install builds the seed programs with pkg-config
now    python3            cmd python3                        # scripts/check-layers.py (make lint), the Python package's tests
now    python3-venv       py ensurepip venv                  # server/tests: redis-py in a virtual environment; make test-python
now    redis-tools        cmd redis-cli redis-benchmark      # server/tests: redis-cli and redis-benchmark against tvmq serve
now    openssl            cmd openssl                        # TLS tests: scripts/tls-certs.sh makes their certificates
now    tmux               cmd tmux                           # cli/tests/watch.rs: tvmq top driven in a terminal
now    prometheus         cmd prometheus promtool            # server/tests/metrics.rs: promtool checks the exposition, Prometheus scrapes it
now    chromium           cmd chromium                       # server/tests/metrics.rs: the dashboard loaded in headless Chromium
later  redis-server       cmd redis-server                   # c-tests: the lTvm* calls against a redis-server and a Redis Cluster
later  libboost-dev       file /usr/include/boost/interprocess/ipc/message_queue.hpp   # make bench-smoke: the Boost.Interprocess peer
later  fonts-dejavu-core  file /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf         # make bench-smoke: the charts' font
later  libdpdk-dev        file /usr/include/dpdk/rte_ring_elem.h                       # make bench-smoke: DPDK's rte_ring peer (223 packages, ~1.5 min)
root   passwd             cmd useradd groupadd usermod       # c-tests/security.sh (as root): a second user and a group
root   util-linux         cmd flock                          # c-tests/security.sh: one run at a time
root   util-linux         any setpriv runuser                # c-tests/security.sh: commands run as the second user
EOF
)

DRY=${DEPS_DRY_RUN:-0}
if [ "${1:-}" = --dry-run ]; then
    DRY=1
    shift
fi
ROOTDIR=${DEPS_ROOT:-}
SEARCH=${DEPS_PATH:-$PATH:/usr/sbin:/sbin}
MYUID=${DEPS_UID:-$(id -u)}

has_cmd() { PATH=$SEARCH command -v "$1" >/dev/null 2>&1; }

# present CHECK ARGS...: is the package's check met?
present() {
    local kind=$1
    shift
    case $kind in
        cmd) for c in "$@"; do has_cmd "$c" || return 1; done ;;
        any) for c in "$@"; do has_cmd "$c" && return 0; done; return 1 ;;
        file) [ -e "$ROOTDIR$1" ] ;;
        py) has_cmd python3 && PATH=$SEARCH python3 -c "import $(IFS=,; echo "$*")" >/dev/null 2>&1 ;;
        *) echo "scripts/deps.sh: unknown check '$kind' in the list" >&2; exit 2 ;;
    esac
}

# rows: "phase package present|missing why" for each line of the list.
rows() {
    local phase pkg kind rest args why
    while read -r phase pkg kind rest; do
        [ -z "$phase" ] && continue
        args=${rest%%#*}
        why=${rest#*# }
        # shellcheck disable=SC2086 # the check's words
        if present "$kind" $args; then echo "$phase $pkg present $why"; else echo "$phase $pkg missing $why"; fi
    done <<<"$LIST"
}

# missing PHASE...: the missing packages of those phases, once each.
missing() {
    rows | awk -v phases=" $* " 'index(phases, " " $1 " ") && $3 == "missing" && !seen[$2]++ { print $2 }'
}

# The phases this user's `make test` needs.
phases() {
    if [ "$MYUID" = 0 ]; then echo now later root; else echo now later; fi
}

apt_install() { # apt-get install of the packages given, as .ci/run did
    local cmd=(apt-get install -y -qq -o Dpkg::Options::=--force-unsafe-io --no-install-recommends "$@")
    if [ "$DRY" = 1 ]; then echo "would run: DEBIAN_FRONTEND=noninteractive ${cmd[*]}"; return 0; fi
    DEBIAN_FRONTEND=noninteractive "${cmd[@]}"
}

apt_update() {
    if [ "$DRY" = 1 ]; then echo "would run: apt-get update -qq"; return 0; fi
    apt-get update -qq
}

start() {
    local state=${1:?scripts/deps.sh start STATEDIR}
    mkdir -p "$state"
    rm -f "$state/rc" "$state/log"
    if ! has_cmd cargo; then
        echo "make test: cargo is not installed: install Rust (stable) with rustup, then run make test again" >&2
        exit 1
    fi
    local phases all now later
    phases=$(phases)
    # shellcheck disable=SC2086 # the phases' words
    all=$(missing $phases | xargs)
    if [ -z "$all" ]; then
        echo 0 >"$state/rc"
        return 0
    fi
    if [ "$MYUID" != 0 ]; then
        {
            echo "make test needs packages this machine lacks: $all"
            echo "Install them (as root, with one command), then run make test again:"
            echo "  sudo apt-get install -y $all"
        } >&2
        exit 1
    fi
    now=$(missing now | xargs)
    # shellcheck disable=SC2086 # the phases' words
    later=$(missing ${phases#now } | xargs)
    echo "== installing what the build and the Rust tests need: ${now:-nothing}"
    apt_update
    if [ -n "$now" ]; then
        # shellcheck disable=SC2086 # package names
        apt_install $now
    fi
    if [ -z "$later" ]; then
        echo 0 >"$state/rc"
        return 0
    fi
    echo "== installing in the background (log: $state/log): $later"
    # The subshell writes the exit status when done, which `wait` reads;
    # this script returns at once, and make starts the build.
    # shellcheck disable=SC2086 # package names
    ( rc=0; apt_install $later >"$state/log" 2>&1 || rc=$?; echo "$rc" >"$state/rc" ) </dev/null >/dev/null 2>&1 &
}

# Waits until the background install of `start` has written its exit
# status; fails, printing its log, if it failed.
wait_for() {
    local state=${1:?scripts/deps.sh wait STATEDIR}
    local began waited rc
    began=$(date +%s)
    while [ ! -s "$state/rc" ]; do
        if [ $(( $(date +%s) - began )) -ge "${DEPS_WAIT_LIMIT:-1800}" ]; then
            echo "scripts/deps.sh: the background apt-get install has not finished after ${DEPS_WAIT_LIMIT:-1800} s (log: $state/log)" >&2
            exit 1
        fi
        sleep 1
    done
    rc=$(cat "$state/rc")
    if [ "$rc" != 0 ]; then
        echo "scripts/deps.sh: the background apt-get install failed (exit $rc); its log, $state/log:" >&2
        cat "$state/log" >&2
        exit 1
    fi
    waited=$(( $(date +%s) - began ))
    if [ -s "$state/log" ] || [ "$waited" -gt 0 ]; then
        echo "== background install done (waited ${waited} s; log: $state/log)"
    fi
}

case ${1:-} in
    list) rows | awk '{ why = $0; sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", why); printf "%-6s %-18s %-8s %s\n", $1, $2, $3, why }' ;;
    missing) missing $(phases) | xargs ;;
    start) start "${2:-}" ;;
    wait) wait_for "${2:-}" ;;
    *)
        echo "usage: bash scripts/deps.sh [--dry-run] list | missing | start STATEDIR | wait STATEDIR" >&2
        exit 2
        ;;
esac
