#!/usr/bin/env bash
# scripts/test-run.sh (make test-scripts): the rates `make run` prints for
# the seed programs' times (scripts/run.sh --rate), which have a 1 ms clock.
set -euo pipefail
cd "$(dirname "$0")/.."
failed=0
expect() { # records ms expected
    local got
    got=$(bash scripts/run.sh --rate "$1" "$2")
    if [ "$got" != "$3" ]; then
        echo "FAIL  test-run: $1 records in $2 ms: \"$got\", expected \"$3\""
        failed=1
    fi
}
expect 4000000 343 "11.66 M/s"  # long enough: one figure
expect 100000 100 "1.00 M/s"
expect 100000 3 "25-50 M/s"     # 3 ms is 2 to 4 ms: not "33.33 M/s"
expect 100000 99 "1-1.02 M/s"    # 98 to 100 ms
expect 100000 1 "> 50 M/s"      # 0 to 2 ms
expect 100000 0 "> 100 M/s"
if [ "$failed" = 0 ]; then echo "PASS  test-run (make run's rates from a 1 ms clock)"; fi
exit "$failed"
