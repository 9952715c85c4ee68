#!/usr/bin/env bash
# `make test`'s suite on a 2-core box, in two phases: scripts/test-suite.sh PYTEST [ARGS...]
#
#  1. the tests marked `icount` (the qlab loop: its CPU% is counted in guest instructions, so
#     the host's load does not move it) in the background, beside the tests marked `light`
#     (they read no measurement: tests/conftest.py LIGHT_MODULES);
#  2. every other test, alone: a CPU share measured in real seconds needs the host quiet.
#
# The background run's output is printed whole after it ends, not interleaved. Every phase
# runs even when an earlier one failed; the exit status is the first failure's (a phase that
# selects no test -- pytest's 5, e.g. with a single test file in ARGS -- is not a failure).
set -uo pipefail

[ $# -ge 1 ] || { echo "usage: $0 PYTEST [PYTEST_ARGS...]" >&2; exit 2; }
pytest=("$@")
log=$(mktemp "${TMPDIR:-/tmp}/labwarden-icount.XXXXXX")
trap 'rm -f "$log"; [ -n "${bg:-}" ] && kill "$bg" 2>/dev/null' EXIT

ok() { [ "$1" = 0 ] || [ "$1" = 5 ]; }
status=0
note() { ok "$1" || { [ "$status" != 0 ] || status=$1; }; }

echo "== phase 1: the icount tests (in the background, printed when they end) beside the light tests"
t0=$SECONDS
"${pytest[@]}" -m icount >"$log" 2>&1 &
bg=$!
"${pytest[@]}" -m "light and not icount"; note $?
wait "$bg"; rc=$?; bg=
echo "== phase 1: the icount tests"
cat "$log"
note $rc
echo "== phase 1 took $((SECONDS - t0)) s"

echo "== phase 2: every other test, alone"
t0=$SECONDS
"${pytest[@]}" -m "not icount and not light"; note $?
echo "== phase 2 took $((SECONDS - t0)) s"
exit "$status"
