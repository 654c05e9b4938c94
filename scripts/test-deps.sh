#!/usr/bin/env bash
# scripts/test-deps.sh (make test-scripts): scripts/deps.sh's logic, on
# simulated machines (DEPS_PATH, DEPS_ROOT, DEPS_UID, --dry-run): nothing is
# installed or removed. The package sets expected are read from the list
# itself (`deps.sh list`), so that adding a package needs no change here.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEPS_WAIT_LIMIT=20
DEPS=$PWD/scripts/deps.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() { echo "FAIL  test-deps: $*"; failed=1; }
words() { xargs -n1 <<<"$*" | sort -u | xargs; }

# An empty machine: no command but cargo, no file.
empty=$work/empty-bin
mkdir -p "$empty" "$work/empty-root"
ln -s "$(command -v cargo)" "$empty/cargo"
on_empty() { env DEPS_PATH="$empty" DEPS_ROOT="$work/empty-root" "$@"; }

# The phases, from the list as an empty machine sees it (all missing).
list=$(on_empty bash "$DEPS" list)
phase() { awk -v p="$1" '$1 == p { print $2 }' <<<"$list" | sort -u | xargs; }
now=$(phase now) later=$(phase later) root=$(phase root)
[ -n "$now" ] && [ -n "$later" ] || fail "the list has no now or later packages: $list"
grep -qv ' missing ' <<<"$list" && fail "an empty machine has a package present: $list"

# 1. As root on an empty machine: apt-get update, the `now` packages, then
#    the others in the background; `wait` then succeeds.
out=$(on_empty DEPS_UID=0 bash "$DEPS" --dry-run start "$work/state1" 2>&1) || fail "start as root failed: $out"
pkgs() { grep '^would run: .*apt-get install' | sed 's/.*--no-install-recommends //'; }
first=$(pkgs <<<"$out")
grep -q '^would run: apt-get update' <<<"$out" || fail "no apt-get update before installing: $out"
[ "$(words "$first")" = "$(words "$now")" ] || fail "root installs first [$first], expected [$now]"
grep -q "installing in the background" <<<"$out" || fail "the later packages are not installed in the background: $out"
out=$(bash "$DEPS" wait "$work/state1" 2>&1) || fail "wait after a dry run failed: $out"
second=$(pkgs <"$work/state1/log")
[ "$(words "$second")" = "$(words "$later $root")" ] || fail "root installs later [$second], expected [$later $root]"

# 2. As another user on an empty machine: one command, exit 1, no install.
if out=$(on_empty DEPS_UID=1000 bash "$DEPS" --dry-run start "$work/state2" 2>&1); then
    fail "start as a user with packages missing succeeded: $out"
fi
grep -q 'would run' <<<"$out" && fail "a user's start tried to install: $out"
cmd=$(grep -c 'apt-get install' <<<"$out" || true)
[ "$cmd" = 1 ] || fail "a user is told $cmd commands, expected one: $out"
asked=$(grep 'sudo apt-get install -y' <<<"$out" | sed 's/.*install -y //')
[ "$(words "$asked")" = "$(words "$now $later")" ] || fail "a user is asked for [$asked], expected [$now $later]"
[ -e "$work/state2/rc" ] && fail "a user's failed start left an exit status for wait"

# 3. A machine with everything: nothing to do, nothing printed.
full=$work/full-bin
mkdir -p "$full"
ln -s "$(command -v cargo)" "$full/cargo"
for c in $(sed -n 's/^ *[a-z]* *[^ ]* *\(cmd\|any\) *\([^#]*\)#.*/\2/p' "$DEPS"); do
    printf '#!/bin/sh\nexit 0\n' >"$full/$c"
    chmod +x "$full/$c"
done
for f in $(sed -n 's/^ *[a-z]* *[^ ]* *file *\([^ ]*\).*/\1/p' "$DEPS"); do
    mkdir -p "$work/full-root$(dirname "$f")"
    : >"$work/full-root$f"
done
for uid in 0 1000; do
    out=$(DEPS_PATH=$full DEPS_ROOT=$work/full-root DEPS_UID=$uid bash "$DEPS" --dry-run start "$work/state3" 2>&1) ||
        fail "start (uid $uid) on a full machine failed: $out"
    [ -z "$out" ] || fail "start (uid $uid) on a full machine printed: $out"
    out=$(bash "$DEPS" wait "$work/state3" 2>&1) || fail "wait on a full machine failed: $out"
    [ -z "$out" ] || fail "wait on a full machine printed: $out"
done

# 4. No cargo: said, and nothing installed.
mkdir -p "$work/none"
if out=$(DEPS_PATH=$work/none DEPS_ROOT=$work/empty-root DEPS_UID=0 bash "$DEPS" --dry-run start "$work/state4" 2>&1); then
    fail "start without cargo succeeded: $out"
fi
grep -q 'cargo is not installed' <<<"$out" || fail "no word about cargo: $out"
grep -q 'would run' <<<"$out" && fail "start without cargo installed something: $out"

# 5. A failed background install fails `wait`, with its log.
mkdir -p "$work/state5"
echo 100 >"$work/state5/rc"
echo "E: Unable to locate package libdpdk-dev" >"$work/state5/log"
if out=$(bash "$DEPS" wait "$work/state5" 2>&1); then fail "wait after a failed install succeeded"; fi
grep -q "Unable to locate package" <<<"$out" || fail "wait does not show the install's log: $out"

if [ "$failed" = 0 ]; then echo "PASS  test-deps (root, user, full machine, no cargo, failed install)"; fi
exit "$failed"
