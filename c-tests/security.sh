#!/usr/bin/env bash
# c-tests/security.sh: the file-permission guarantees of tvmq, shown with a
# second, unprivileged user (run by c-tests/run.sh; runs alone too).
#
#   [LIBDIR=<dir of libtvm.so>] [TVMQ=<tvmq binary>] bash c-tests/security.sh
#
# Needs root: creates (idempotently, and keeps) the system user `tvmqtest`
# (no home, nologin shell) and the group `tvmqshare` it belongs to, and runs
# commands as tvmqtest with setpriv (or runuser). Shows that:
#   a) a queue created 0600 in a directory both can traverse (0711, root's)
#      cannot be read, written or dropped by tvmqtest: tvmq stat/drop and
#      lAttchTable/lPush/lPop/lDropTable fail with SHM_ERR_ACCES, the file
#      is unchanged;
#   b) in a directory of group tvmqshare, mode 2770, a queue created with
#      --mode 0660 gets the group, and tvmqtest (in the group) can push, pop
#      and drop it; without the group it cannot;
#   c) a valid queue file planted by tvmqtest in a shared directory (1777 or
#      0777) under a queue's name, or renamed over root's queue, is refused
#      (SHM_ERR_ACCES) when root opens it, and so is a symbolic link planted
#      there pointing to a real queue;
#   d) the default directory /dev/shm/tvmq-<uid> is created 0700 (whatever
#      the umask), and one planted there by another user (a directory or a
#      symbolic link) makes tvmq refuse (SHM_ERR_ACCES) instead of using it.
#
# Prints one PASS/FAIL line per check (run.sh's format) and, when not root,
# the single line "SKIP security: needs root to create a second user".
# Exits 0 (all passed or skipped) or 1. Everything it creates (temp dirs,
# /dev/shm/tvmq-<tvmqtest uid>) is removed; runs of it are serialised with
# a lock, since (d) uses a fixed path.

set -u
PATH=$PATH:/usr/sbin:/sbin # useradd, groupadd, usermod, runuser
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIBDIR=${LIBDIR:-$ROOT/target/release}
TVMQ=${TVMQ:-$LIBDIR/tvmq}
TUSER=tvmqtest
TGROUP=tvmqshare
CMD_TIMEOUT=20

if [ "$(id -u)" != 0 ]; then
    echo "SKIP security: needs root to create a second user"
    exit 0
fi

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
PASSED=0
FAILED=0
WORK=
DEFAULT_DIR=

cleanup() {
    [ -n "$WORK" ] && rm -rf -- "$WORK"
    # The default directory of tvmqtest: only ever made by this script.
    [ -n "$DEFAULT_DIR" ] && rm -rf -- "$DEFAULT_DIR"
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

# One run at a time (the default directory of tvmqtest is one fixed path):
# a lock on /dev/shm itself, so that no lock file is left behind.
exec 9</dev/shm
if ! flock -w 120 9; then
    echo "FAIL  security.lock  (another security.sh held the lock on /dev/shm for 120 s)"
    exit 1
fi

WORK=$(mktemp -d /tmp/tvmq-security.XXXXXX) || exit 1
chmod 0755 "$WORK" # tvmqtest runs the binaries copied into it
LOG=$WORK/log

# check NAME FUNCTION: runs FUNCTION (returns non-zero and/or prints why on
# failure), prints its PASS/FAIL line and, on failure, its log.
check() {
    local name=$1 fn=$2 t0 t1 rc
    t0=$(now_ms)
    ( cd "$WORK" && "$fn" ) >"$LOG" 2>&1
    rc=$?
    t1=$(now_ms)
    if [ $rc -eq 0 ]; then
        printf 'PASS  %-50s %6d ms\n' "security.$name" $((t1 - t0))
        PASSED=$((PASSED + 1))
    else
        printf 'FAIL  %-50s %6d ms\n' "security.$name" $((t1 - t0))
        sed -e 's/^/      | /' "$LOG" | head -n 40
        FAILED=$((FAILED + 1))
    fi
}

fail() { echo "$*"; return 1; }

# ---------------------------------------------------------------------------
# Setup: the user, the group, binaries tvmqtest can run.
# ---------------------------------------------------------------------------

setup_user() {
    getent group "$TGROUP" >/dev/null || groupadd --system "$TGROUP" || return 1
    if ! getent passwd "$TUSER" >/dev/null; then
        useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
            --user-group --groups "$TGROUP" "$TUSER" || return 1
    fi
    # An existing user may predate the group.
    id -nG "$TUSER" | tr ' ' '\n' | grep -qx "$TGROUP" || usermod -a -G "$TGROUP" "$TUSER" || return 1
    [ "$(id -u "$TUSER")" != 0 ] || fail "$TUSER has uid 0" || return 1
}

# as_test CMD...: runs CMD as tvmqtest (with its groups), bounded in time;
# as_nogroup CMD...: the same without its supplementary groups. With
# setpriv (no PAM, no login shell needed) when it works here, else runuser.
SWITCH=setpriv
as_test() {
    if [ "$SWITCH" = setpriv ]; then
        timeout -k 2 "$CMD_TIMEOUT" setpriv --reuid "$TUSER" --regid "$TUSER" --init-groups -- "$@"
    else
        timeout -k 2 "$CMD_TIMEOUT" runuser -u "$TUSER" -- "$@"
    fi
}
as_nogroup() {
    if [ "$SWITCH" = setpriv ]; then
        timeout -k 2 "$CMD_TIMEOUT" setpriv --reuid "$TUSER" --regid "$TUSER" --clear-groups -- "$@"
    else
        timeout -k 2 "$CMD_TIMEOUT" runuser -u "$TUSER" -g "$TUSER" -- "$@"
    fi
}
as_root() { timeout -k 2 "$CMD_TIMEOUT" "$@"; }

choose_switch() {
    local want
    want="$(id -u "$TUSER") $(id -G "$TUSER" | tr ' ' '\n' | sort -n | tr '\n' ' ')"
    for SWITCH in setpriv runuser; do
        command -v "$SWITCH" >/dev/null || continue
        [ "$(as_test sh -c 'echo "$(id -u) $(id -G | tr " " "\n" | sort -n | tr "\n" " ")"')" = "$want" ] && return 0
        echo "$SWITCH does not run commands as $TUSER with its groups here"
    done
    return 1
}

BIN=$WORK/bin
CLIENT=$BIN/security_client

setup_binaries() {
    mkdir -p "$BIN" || return 1
    cp "$TVMQ" "$BIN/tvmq" && cp "$LIBDIR/libtvm.so" "$BIN/libtvm.so" && ln -sfn libtvm.so "$BIN/libtvm.so.0" || return 1
    local msgs
    msgs=$(gcc -std=gnu17 -O1 -Wall -Wextra -Werror "$ROOT/c-tests/security_client.c" \
        -I "$ROOT/include" -L "$BIN" -ltvm -lpthread "-Wl,-rpath,$BIN" -o "$CLIENT" 2>&1) ||
        fail "cannot compile security_client.c: $msgs" || return 1
    chmod -R a+rX "$BIN"
    # tvmqtest can run both (the path is traversable, the files executable).
    as_test "$BIN/tvmq" --help >/dev/null || fail "$TUSER cannot run $BIN/tvmq" || return 1
    as_test "$CLIENT" 2>/dev/null; [ $? -eq 2 ] || fail "$TUSER cannot run $CLIENT" || return 1
}

setup() {
    setup_user || fail "cannot create user $TUSER / group $TGROUP (useradd, groupadd, usermod)" || return 1
    choose_switch || fail "neither setpriv nor runuser can switch to $TUSER" || return 1
    setup_binaries || return 1
    echo "user $TUSER uid $(id -u "$TUSER") groups $(id -nG "$TUSER"), switching with $SWITCH"
}

T=$WORK/bin/tvmq

# expect WHAT ACTUAL EXPECTED: the two texts are equal.
expect() {
    [ "$2" = "$3" ] && return 0
    printf '%s:\n  got:\n%s\n  want:\n%s\n' "$1" "$(sed 's/^/    /' <<<"$2")" "$(sed 's/^/    /' <<<"$3")"
    return 1
}

# tvmq_fails WHAT CODE CMD...: CMD (a tvmq command) fails, naming CODE on stderr.
tvmq_fails() {
    local what=$1 code=$2 out rc
    shift 2
    out=$("$@" 2>&1)
    rc=$?
    [ $rc -ne 0 ] || fail "$what: succeeded, want failure with $code: $out" || return 1
    grep -q "($code)" <<<"$out" || fail "$what: exit $rc, want $code: $out" || return 1
}

# Identity and content of a file: mode owner group size sha256.
fingerprint() { stat -c '%a %U %G %s' "$1" | tr '\n' ' '; sha256sum <"$1" | cut -c1-64; }

# ---------------------------------------------------------------------------
# a) A private queue (0600) in a directory both can traverse
# ---------------------------------------------------------------------------
c_private_queue() {
    local d=$WORK/a f before out
    mkdir "$d" && chmod 0711 "$d" || return 1
    f=$d/queue-5.tvmq
    as_root env TVMDBD="$d" "$T" create 5 --rows 4 --size 64 >/dev/null || fail "root: tvmq create failed" || return 1
    expect "root pushes" "$(as_root env TVMDBD="$d" "$CLIENT" push:5:41)" "push:5:41 TVM_DONE_SUCC" || return 1
    [ "$(stat -c '%a %U' "$f")" = "600 root" ] || fail "queue file is $(stat -c '%a %U' "$f"), want 600 root" || return 1
    # tvmqtest can reach the file (the directory is traversable): what stops
    # it is the file's mode.
    as_test stat "$f" >/dev/null || fail "$TUSER cannot even stat $f: the test proves nothing" || return 1
    before=$(fingerprint "$f")

    tvmq_fails "$TUSER: tvmq stat" SHM_ERR_ACCES as_test "$T" --dir "$d" stat 5 || return 1
    tvmq_fails "$TUSER: tvmq drop" SHM_ERR_ACCES as_test "$T" --dir "$d" drop 5 || return 1
    tvmq_fails "$TUSER: tvmq repair" SHM_ERR_ACCES as_test "$T" --dir "$d" repair 5 || return 1
    out=$(as_test env TVMDBD="$d" "$CLIENT" attach:5 push:5:666 pop:5 drop:5 create:6)
    expect "$TUSER: C calls" "$out" "attach:5 SHM_ERR_ACCES
push:5:666 SHM_ERR_ACCES
pop:5 SHM_ERR_ACCES
drop:5 SHM_ERR_ACCES
create:6 SHM_ERR_ACCES" || return 1
    # Creating over it is refused too, and touches nothing.
    out=$(as_test env TVMDBD="$d" "$CLIENT" create:5)
    expect "$TUSER: create over it" "$out" "create:5 TBL_ARD_EXIST" || return 1

    [ "$(fingerprint "$f")" = "$before" ] || fail "the file changed: $before -> $(fingerprint "$f")" || return 1
    [ "$(ls -A "$d")" = "queue-5.tvmq" ] || fail "directory now holds: $(ls -A "$d")" || return 1
    # Root still has its record, and only it.
    out=$(as_root env TVMDBD="$d" "$CLIENT" pop:5 pop:5 drop:5)
    expect "root afterwards" "$out" "pop:5 TVM_DONE_SUCC 41
pop:5 NO_DATA_FOUND
drop:5 TVM_DONE_SUCC"
}

# ---------------------------------------------------------------------------
# b) A group-shared queue: directory tvmqshare 2770, queue --mode 0660
# ---------------------------------------------------------------------------
c_group_queue() {
    local d=$WORK/b f out
    mkdir "$d" && chgrp "$TGROUP" "$d" && chmod 2770 "$d" || return 1
    f=$d/queue-7.tvmq
    as_root env TVMDBD="$d" "$T" create 7 --rows 4 --size 64 --mode 0660 >/dev/null || fail "root: tvmq create --mode 0660 failed" || return 1
    # The file gets the directory's (setgid) group and exactly the mode asked.
    [ "$(stat -c '%a %U %G' "$f")" = "660 root $TGROUP" ] ||
        fail "queue file is $(stat -c '%a %U %G' "$f"), want 660 root $TGROUP" || return 1
    expect "root pushes" "$(as_root env TVMDBD="$d" "$CLIENT" push:7:1)" "push:7:1 TVM_DONE_SUCC" || return 1

    # Without the group, tvmqtest cannot get in.
    out=$(as_nogroup env TVMDBD="$d" "$CLIENT" attach:7 push:7:9 pop:7 drop:7)
    expect "$TUSER without $TGROUP" "$out" "attach:7 SHM_ERR_ACCES
push:7:9 SHM_ERR_ACCES
pop:7 SHM_ERR_ACCES
drop:7 SHM_ERR_ACCES" || return 1

    # With it: attach, pop root's record, push two.
    out=$(as_test env TVMDBD="$d" "$CLIENT" attach:7 pop:7 push:7:2 push:7:3)
    expect "$TUSER in $TGROUP" "$out" "attach:7 TVM_DONE_SUCC
pop:7 TVM_DONE_SUCC 1
push:7:2 TVM_DONE_SUCC
push:7:3 TVM_DONE_SUCC" || return 1
    out=$(as_test "$T" --dir "$d" stat 7) || fail "$TUSER: tvmq stat failed: $out" || return 1
    grep -Eq '^depth +2$' <<<"$out" || fail "$TUSER: tvmq stat: depth is not 2: $out" || return 1
    # Root sees tvmqtest's records, in order.
    expect "root pops" "$(as_root env TVMDBD="$d" "$CLIENT" pop:7)" "pop:7 TVM_DONE_SUCC 2" || return 1
    # tvmqtest drops it (with the CLI here; lDropTable below).
    out=$(as_test "$T" --dir "$d" drop 7 2>&1) || fail "$TUSER: tvmq drop failed: $out" || return 1
    [ ! -e "$f" ] || fail "$f still exists after $TUSER dropped it" || return 1
    expect "root after the drop" "$(as_root env TVMDBD="$d" "$CLIENT" attach:7)" "attach:7 TBL_NOT_FOUND" || return 1

    # The same with the C calls: a second queue created 0660, dropped by lDropTable.
    as_root env TVMDBD="$d" "$T" create 8 --rows 4 --size 64 --mode 0660 >/dev/null || return 1
    out=$(as_test env TVMDBD="$d" "$CLIENT" push:8:5 pop:8 pop:8 drop:8 attach:8)
    expect "$TUSER: C calls on queue 8" "$out" "push:8:5 TVM_DONE_SUCC
pop:8 TVM_DONE_SUCC 5
pop:8 NO_DATA_FOUND
drop:8 TVM_DONE_SUCC
attach:8 TBL_NOT_FOUND" || return 1
    [ -z "$(ls -A "$d")" ] || fail "directory not empty: $(ls -A "$d")"
}

# ---------------------------------------------------------------------------
# c) Files planted by tvmqtest in shared directories
# ---------------------------------------------------------------------------
c_planted_file() {
    local d=$WORK/c f out before
    mkdir "$d" && chmod 1777 "$d" || return 1
    f=$d/queue-9.tvmq
    # A perfectly valid queue file, world-writable, made by tvmqtest itself.
    out=$(as_test "$T" --dir "$d" create 9 --rows 4 --size 64 --mode 0666 2>&1) || fail "$TUSER: tvmq create failed: $out" || return 1
    expect "$TUSER uses it" "$(as_test env TVMDBD="$d" "$CLIENT" push:9:13)" "push:9:13 TVM_DONE_SUCC" || return 1
    [ "$(stat -c '%a %U' "$f")" = "666 $TUSER" ] || fail "planted file is $(stat -c '%a %U' "$f")" || return 1
    before=$(fingerprint "$f")
    # Root (a user who is neither the file's owner nor the directory's) refuses it.
    out=$(as_root env TVMDBD="$d" "$CLIENT" attach:9 push:9:1 pop:9 drop:9 create:9)
    expect "root opens the planted file" "$out" "attach:9 SHM_ERR_ACCES
push:9:1 SHM_ERR_ACCES
pop:9 SHM_ERR_ACCES
drop:9 SHM_ERR_ACCES
create:9 TBL_ARD_EXIST" || return 1
    tvmq_fails "root: tvmq stat of the planted file" SHM_ERR_ACCES as_root "$T" --dir "$d" stat 9 || return 1
    tvmq_fails "root: tvmq drop of the planted file" SHM_ERR_ACCES as_root "$T" --dir "$d" drop 9 || return 1
    [ "$(fingerprint "$f")" = "$before" ] || fail "the planted file changed: $before -> $(fingerprint "$f")" || return 1

    # In a 0777 directory (no sticky bit) tvmqtest can replace root's queue
    # by renaming its own file over it: root then refuses the file.
    local e=$WORK/c777
    mkdir "$e" && chmod 0777 "$e" || return 1
    as_root env TVMDBD="$e" "$T" create 15 --rows 4 --size 64 --mode 0644 >/dev/null || return 1
    expect "root uses queue 15" "$(as_root env TVMDBD="$e" "$CLIENT" push:15:1 pop:15)" "push:15:1 TVM_DONE_SUCC
pop:15 TVM_DONE_SUCC 1" || return 1
    as_test "$T" --dir "$e" create 16 --rows 4 --size 64 --mode 0666 >/dev/null || return 1
    as_test env TVMDBD="$e" "$CLIENT" push:16:666 >/dev/null || return 1
    as_test mv -f "$e/queue-16.tvmq" "$e/queue-15.tvmq" || fail "$TUSER could not rename over root's file" || return 1
    [ "$(stat -c %U "$e/queue-15.tvmq")" = "$TUSER" ] || return 1
    out=$(as_root env TVMDBD="$e" "$CLIENT" attach:15 pop:15 push:15:2)
    expect "root after its queue was replaced" "$out" "attach:15 SHM_ERR_ACCES
pop:15 SHM_ERR_ACCES
push:15:2 SHM_ERR_ACCES"
}

c_planted_symlink() {
    local d=$WORK/s real=$WORK/s-real f out before
    mkdir "$d" "$real" && chmod 1777 "$d" && chmod 0700 "$real" || return 1
    # Root's real queues: 12 in a private directory, 13 in the shared one.
    as_root env TVMDBD="$real" "$T" create 12 --rows 4 --size 64 >/dev/null || return 1
    as_root env TVMDBD="$d" "$T" create 13 --rows 4 --size 64 >/dev/null || return 1
    expect "root pushes" "$(as_root env TVMDBD="$real" "$CLIENT" push:12:120)" "push:12:120 TVM_DONE_SUCC" || return 1
    expect "root pushes" "$(as_root env TVMDBD="$d" "$CLIENT" push:13:130)" "push:13:130 TVM_DONE_SUCC" || return 1
    before=$(fingerprint "$real/queue-12.tvmq")
    # tvmqtest plants links under queue names: to the private queue (same
    # id), and to root's queue 13 next to it.
    as_test ln -s "$real/queue-12.tvmq" "$d/queue-12.tvmq" || return 1
    as_test ln -s "$d/queue-13.tvmq" "$d/queue-14.tvmq" || return 1
    [ "$(stat -c %U "$d/queue-12.tvmq")" = "$TUSER" ] && [ -L "$d/queue-12.tvmq" ] || return 1
    out=$(as_root env TVMDBD="$d" "$CLIENT" attach:12 push:12:1 pop:12 drop:12 attach:14 pop:14 push:14:1 drop:14)
    expect "root opens the planted links" "$out" "attach:12 SHM_ERR_ACCES
push:12:1 SHM_ERR_ACCES
pop:12 SHM_ERR_ACCES
drop:12 SHM_ERR_ACCES
attach:14 SHM_ERR_ACCES
pop:14 SHM_ERR_ACCES
push:14:1 SHM_ERR_ACCES
drop:14 SHM_ERR_ACCES" || return 1
    tvmq_fails "root: tvmq stat of a planted link" SHM_ERR_ACCES as_root "$T" --dir "$d" stat 12 || return 1
    tvmq_fails "root: tvmq drop of a planted link" SHM_ERR_ACCES as_root "$T" --dir "$d" drop 14 || return 1
    # The links are still there and the real queues untouched.
    [ -L "$d/queue-12.tvmq" ] && [ -L "$d/queue-14.tvmq" ] || fail "a planted link was removed" || return 1
    [ "$(fingerprint "$real/queue-12.tvmq")" = "$before" ] || fail "root's private queue changed" || return 1
    out=$(as_root env TVMDBD="$real" "$CLIENT" pop:12 pop:12)
    expect "root's private queue" "$out" "pop:12 TVM_DONE_SUCC 120
pop:12 NO_DATA_FOUND" || return 1
    out=$(as_root env TVMDBD="$d" "$CLIENT" pop:13 pop:13)
    expect "root's shared queue" "$out" "pop:13 TVM_DONE_SUCC 130
pop:13 NO_DATA_FOUND"
}

# ---------------------------------------------------------------------------
# d) The default directory /dev/shm/tvmq-<uid>
# ---------------------------------------------------------------------------
c_default_dir_mode() {
    local out m
    [ ! -e "$DEFAULT_DIR" ] && [ ! -L "$DEFAULT_DIR" ] || fail "$DEFAULT_DIR exists already" || return 1
    # Created by the library (lCircleQueue), umask 0: 0700 all the same.
    out=$(umask 0 && as_test env -u TVMDBD "$CLIENT" create:3 push:3:33 pop:3)
    expect "$TUSER with the default directory" "$out" "create:3 TVM_DONE_SUCC
push:3:33 TVM_DONE_SUCC
pop:3 TVM_DONE_SUCC 33" || return 1
    m=$(stat -c '%F %a %U' "$DEFAULT_DIR") || return 1
    [ "$m" = "directory 700 $TUSER" ] || fail "$DEFAULT_DIR is '$m', want 'directory 700 $TUSER'" || return 1
    m=$(stat -c '%a %U' "$DEFAULT_DIR/queue-3.tvmq")
    [ "$m" = "600 $TUSER" ] || fail "queue file is '$m', want '600 $TUSER'" || return 1
    rm -rf -- "$DEFAULT_DIR"
    # Created by the CLI, umask 077.
    out=$(umask 077 && as_test env -u TVMDBD "$T" create 4 --rows 2 --size 8 2>&1) || fail "$TUSER: tvmq create: $out" || return 1
    m=$(stat -c '%F %a %U' "$DEFAULT_DIR")
    [ "$m" = "directory 700 $TUSER" ] || fail "$DEFAULT_DIR (CLI) is '$m', want 'directory 700 $TUSER'" || return 1
    out=$(as_test env -u TVMDBD "$T" list 2>&1) || fail "$TUSER: tvmq list: $out" || return 1
    grep -q "queue-4.tvmq" <<<"$out" || fail "$TUSER: tvmq list does not show queue 4: $out" || return 1
    expect "$TUSER drops" "$(as_test env -u TVMDBD "$CLIENT" drop:4)" "drop:4 TVM_DONE_SUCC" || return 1
    rm -rf -- "$DEFAULT_DIR"
}

# A default directory planted by someone else (here root): refused, unused.
c_default_dir_foreign() {
    local out elsewhere=$WORK/elsewhere
    rm -rf -- "$DEFAULT_DIR"
    mkdir "$DEFAULT_DIR" && chmod 0777 "$DEFAULT_DIR" || return 1 # even writable by tvmqtest
    out=$(as_test env -u TVMDBD "$CLIENT" create:3 attach:3 push:3:1 pop:3 drop:3)
    expect "$TUSER with a default directory owned by root" "$out" "create:3 SHM_ERR_ACCES
attach:3 SHM_ERR_ACCES
push:3:1 SHM_ERR_ACCES
pop:3 SHM_ERR_ACCES
drop:3 SHM_ERR_ACCES" || return 1
    tvmq_fails "$TUSER: tvmq create" SHM_ERR_ACCES as_test env -u TVMDBD "$T" create 3 --rows 2 --size 8 || return 1
    [ -z "$(ls -A "$DEFAULT_DIR")" ] || fail "something was created in the planted directory: $(ls -A "$DEFAULT_DIR")" || return 1
    # A queue planted in it by its owner is not used either.
    as_root env TVMDBD="$DEFAULT_DIR" "$T" create 5 --rows 2 --size 64 --mode 0666 >/dev/null || return 1
    out=$(as_test env -u TVMDBD "$CLIENT" attach:5 push:5:1)
    expect "$TUSER and a queue in the planted directory" "$out" "attach:5 SHM_ERR_ACCES
push:5:1 SHM_ERR_ACCES" || return 1
    tvmq_fails "$TUSER: tvmq stat" SHM_ERR_ACCES as_test env -u TVMDBD "$T" stat 5 || return 1
    rm -rf -- "$DEFAULT_DIR"
}

# A symbolic link planted as the default directory (tvm.h: a symbolic link
# is SHM_ERR_ACCES): to a directory the victim could write (0777, root's)...
c_default_dir_symlink() {
    local out target=$WORK/lure
    mkdir "$target" && chmod 0777 "$target" || return 1
    rm -rf -- "$DEFAULT_DIR"
    ln -s "$target" "$DEFAULT_DIR" || return 1
    out=$(as_test env -u TVMDBD "$CLIENT" create:3 attach:3 push:3:1)
    # Refused: nothing was created through the link...
    [ -z "$(ls -A "$target")" ] || fail "queues were created through the link: $(ls -A "$target")" || return 1
    # ...with the code tvm.h gives for a symbolic link.
    expect "$TUSER with a default directory that is a link to a 0777 directory" "$out" "create:3 SHM_ERR_ACCES
attach:3 SHM_ERR_ACCES
push:3:1 SHM_ERR_ACCES" || return 1
    rm -f -- "$DEFAULT_DIR"
}

# ...and dangling (the victim would create the directory where it points).
c_default_dir_dangling() {
    local out
    rm -rf -- "$DEFAULT_DIR"
    ln -s "$WORK/nowhere/sub" "$DEFAULT_DIR" || return 1
    out=$(as_test env -u TVMDBD "$CLIENT" create:3 attach:3)
    [ ! -e "$WORK/nowhere" ] || fail "the directory was created where the link points" || return 1
    expect "$TUSER with a dangling default-directory link" "$out" "create:3 SHM_ERR_ACCES
attach:3 SHM_ERR_ACCES" || return 1
    rm -f -- "$DEFAULT_DIR"
}

# ---------------------------------------------------------------------------

if ! setup >"$LOG" 2>&1; then
    echo "FAIL  security.setup"
    sed -e 's/^/      | /' "$LOG" | head -n 40
    exit 1
fi
DEFAULT_DIR=/dev/shm/tvmq-$(id -u "$TUSER")
if [ -e "$DEFAULT_DIR" ] || [ -L "$DEFAULT_DIR" ]; then
    # Left by an interrupted run of this script (nobody else uses tvmqtest).
    rm -rf -- "$DEFAULT_DIR"
fi

check private_queue_0600_refused c_private_queue
check group_queue_0660_shared c_group_queue
check planted_queue_file_refused c_planted_file
check planted_symlink_refused c_planted_symlink
check default_dir_created_0700 c_default_dir_mode
check default_dir_foreign_owner_refused c_default_dir_foreign
check default_dir_symlink_refused c_default_dir_symlink
check default_dir_dangling_symlink_refused c_default_dir_dangling

[ $FAILED -eq 0 ]
